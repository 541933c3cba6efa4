import { errorText } from "@/server/errors";
import type { Logger } from "@/server/log";
import type { SubagentRuntime } from "@/server/runtime/admission";
import {
  type CapacityController,
  CapacityRejectedError,
  type CapacityStats,
  CapacityTimeoutError,
} from "@/server/runtime/capacity";
import { classifyModelError } from "@/server/runtime/model-errors";
import { runSubagent, type SubagentRunResult } from "../executor";
import { nestedDelegation } from "../tools/task";
import { childRun } from "./entries";
import { retryHistory } from "./resume";
import type { AttemptRequest } from "./scheduler";
import { ERROR_MAX_CHARS, type SwarmRows } from "./settlement";
import type { SwarmTrace } from "./trace";
import { bound, type ChildOutcome, type SwarmContext, type SwarmEntry } from "./types";

/**
 * Each child's attempt: one ordinary sub-agent run (runSubagent) under the process's shared
 * capacity, traced at its boundaries, its usage added to the call's. A rate-limit retry replays
 * the attempt it retries; a resume's first attempt continues its source's history.
 */

export interface AttemptStage {
  ctx: SwarmContext;
  runtime: SubagentRuntime;
  trace: SwarmTrace;
  rows: SwarmRows;
  logger: Logger;
  /** The entries' pending rows, made before a background receipt (each first attempt's run id). */
  firstRunIds?: string[];
}

export async function runChildAttempt(stage: AttemptStage, req: AttemptRequest<SwarmEntry>): Promise<ChildOutcome> {
  const { ctx, runtime, trace, rows } = stage;
  const entry = req.item;
  rows.currentRunId[req.index] = null;
  // Observe the shared process permit at the moment the child asks for it: if it has to
  // wait behind other runs, that boundary goes into the trace.
  const capacity = observedCapacity(runtime.capacity, (stats) =>
    trace.record("shared_capacity_waiting", {
      item_id: entry.item_id,
      attempt: req.attempt,
      running: stats.running,
      queued: stats.queued,
    }),
  );
  // A retry after a rate limit continues the attempt it retries: same messages, same tool results.
  const replay = req.attempt > 1 && req.retryOfRunId ? await retryHistory(ctx.db, req.retryOfRunId) : undefined;
  const result: SubagentRunResult = await runSubagent(ctx.db, {
    ...childRun(ctx, runtime, entry),
    signal: req.signal,
    history: entry.history,
    replay,
    retryOfRunId: req.retryOfRunId ?? undefined,
    // Only the first attempt is the source's successor; retries link to that attempt.
    resumedFromRunId: req.attempt === 1 && entry.resumedFrom ? entry.resumedFrom : undefined,
    runId: req.attempt === 1 ? stage.firstRunIds?.[req.index] : undefined,
    runtime,
    capacity,
    delegate: nestedDelegation({ db: ctx.db, userId: ctx.userId, threadId: ctx.threadId }),
    onCreated: (id) => {
      rows.currentRunId[req.index] = id;
      rows.rows[req.index].child_run_id = id;
      trace.publishSoon();
    },
    onStarted: () => {
      trace.record("child_started", { item_id: entry.item_id, attempt: req.attempt, child_run_id: rows.currentRunId[req.index] });
    },
  });
  rows.usage.input_tokens += result.usage.inputTokens;
  rows.usage.output_tokens += result.usage.outputTokens;
  const own = rows.rows[req.index].usage;
  if (own) {
    own.input_tokens += result.usage.inputTokens;
    own.output_tokens += result.usage.outputTokens;
  }
  const outcome = childOutcome(result);
  trace.record("child_completed", {
    item_id: entry.item_id,
    attempt: req.attempt,
    child_run_id: result.runId,
    status: result.status,
    failure_class: outcome.failureClass ?? null,
    duration_ms: result.durationMs,
  });
  return outcome;
}

function childOutcome(result: SubagentRunResult): ChildOutcome {
  const { runId } = result;
  if (result.status === "completed") return { status: "completed", failureClass: null, runId, text: result.text, error: null };
  if (result.status === "cancelled") return { status: "cancelled", failureClass: null, runId, text: "", error: result.error ?? null };
  return {
    status: "failed",
    failureClass: result.status === "timed_out" ? "timeout" : (result.errorClass ?? "unknown"),
    runId,
    text: result.text,
    error: result.error ?? result.stopReason ?? "failed",
  };
}

/** An attempt that threw (capacity refused or timed out, stopped, or an unexpected error). */
export function attemptThrew(stage: AttemptStage, err: unknown, req: AttemptRequest<SwarmEntry>): ChildOutcome {
  const runId = stage.rows.currentRunId[req.index];
  const base = { runId, text: "", error: bound(errorText(err), ERROR_MAX_CHARS) };
  let outcome: ChildOutcome;
  if (err instanceof CapacityRejectedError) outcome = { ...base, status: "failed", failureClass: "capacity_rejected" };
  else if (err instanceof CapacityTimeoutError) outcome = { ...base, status: "failed", failureClass: "capacity_timeout" };
  else if (isAbort(err, req.signal)) outcome = { ...base, status: "cancelled", failureClass: null };
  else {
    stage.logger.warn({ err, item_id: req.item.item_id }, "swarm child threw");
    outcome = { ...base, status: "failed", failureClass: classifyModelError(err) };
  }
  stage.trace.record("child_completed", {
    item_id: req.item.item_id,
    attempt: req.attempt,
    child_run_id: runId,
    status: outcome.status,
    failure_class: outcome.failureClass ?? null,
  });
  return outcome;
}

function isAbort(err: unknown, signal: AbortSignal): boolean {
  return signal.aborted || (err instanceof Error && err.name === "AbortError");
}

/**
 * The same process controller, seen through a view whose acquire first notes whether the
 * request will have to wait (saturated or others already queued, under the queue policy).
 */
export function observedCapacity(shared: CapacityController, onWait: (stats: CapacityStats) => void): CapacityController {
  const view = Object.create(shared) as CapacityController;
  view.acquire = (options) => {
    const stats = shared.stats();
    if (stats.policy === "queue" && !options?.noQueue && (stats.running >= stats.maxRunning || stats.queued > 0)) onWait(stats);
    return shared.acquire(options);
  };
  return view;
}
