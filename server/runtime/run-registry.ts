import { AbortReason } from "@/server/errors";

/**
 * In-process registry of live runs: run id → the AbortController that stops it and a
 * promise that settles once its row is final. Stop cascades abort through it; runs in
 * another process are not here (they are reported as failed to stop).
 */

export interface LiveRun {
  controller: AbortController;
  /** Settles after the run's row has been finalized and it left the registry. */
  done: Promise<void>;
}


const globalForRuns = globalThis as unknown as { __flotillaLiveRuns?: Map<string, LiveRun> };
function table(): Map<string, LiveRun> {
  globalForRuns.__flotillaLiveRuns ??= new Map();
  return globalForRuns.__flotillaLiveRuns;
}

/**
 * Registers a live run. Call the returned function once the run's row is final; it removes
 * the entry and settles `done`.
 */
export function registerLiveRun(runId: string, controller: AbortController): () => void {
  let settle!: () => void;
  const done = new Promise<void>((resolve) => {
    settle = resolve;
  });
  const entry: LiveRun = { controller, done };
  table().set(runId, entry);
  return () => {
    if (table().get(runId) === entry) table().delete(runId);
    settle();
  };
}

export function getLiveRun(runId: string): LiveRun | undefined {
  return table().get(runId);
}

/** Aborts a live run of this process; false when the run is not live here. */
export function abortLiveRun(runId: string, reason: unknown = new AbortReason("stopped", "stopped by the user")): boolean {
  const entry = table().get(runId);
  if (!entry) return false;
  if (!entry.controller.signal.aborted) entry.controller.abort(reason);
  return true;
}
