import type { BatchStatus } from "./batches";

/**
 * The one table of batch controls: which batch status allows each control, the status that
 * follows and the worker event it sends. The repository enforces it, the `[action]` route
 * serves the batch actions it lists, and the panel enables buttons and shows the optimistic
 * status from it. Adding a control is one row here, one transition in the repository.
 */

/** The worker wake-up event a transition sends (server/batches/notify.ts channels it). */
export type BatchEvent = "submit" | "resume" | "retry" | "cancel";

/** What a control needs to know about a batch to say what follows. */
export interface ControlledBatch {
  status: BatchStatus;
  /** A batch that never started resumes to `queued`; one that did, to `running`. */
  started: boolean;
}

export interface BatchControl {
  /** Statuses the control moves from. */
  from: readonly BatchStatus[];
  /** Statuses where the control is already in effect: answered with the batch unchanged. */
  already: readonly BatchStatus[];
  /** The status that follows (only asked for a status in `from`). */
  next: (batch: ControlledBatch) => BatchStatus;
  /** The event sent to workers, or null when none needs waking. */
  event: BatchEvent | null;
  /** The 409 message for any other status. */
  refusal: (status: BatchStatus) => string;
}

const ACTIVE = ["queued", "running", "paused"] as const satisfies readonly BatchStatus[];

export const BATCH_CONTROLS = {
  /** Stops new claims; running items finish. */
  pause: {
    from: ["queued", "running"],
    already: ["paused"],
    next: () => "paused",
    event: null,
    refusal: (s) => `batch is ${s}; only a queued or running batch can be paused`,
  },
  /** Restarts claims of a paused batch. */
  resume: {
    from: ["paused"],
    already: ["queued", "running"],
    next: (b) => (b.started ? "running" : "queued"),
    event: "resume",
    refusal: (s) => `batch is ${s}; only a paused batch can be resumed`,
  },
  /** Every nonterminal item cancelled, leases cleared, in-flight calls aborted. */
  cancel: {
    from: ACTIVE,
    already: ["cancelled"],
    next: () => "cancelled",
    event: "cancel",
    refusal: (s) => `batch is already ${s}`,
  },
  /** A failed item re-queued; reopens a finished batch (an item control: .../items/{id}/retry). */
  retry: {
    from: [...ACTIVE, "completed", "failed"],
    already: [],
    next: (b) => (b.status === "completed" || b.status === "failed" ? "running" : b.status),
    event: "retry",
    refusal: (s) => `batch is ${s}; its items cannot be retried`,
  },
} as const satisfies Record<string, BatchControl>;

export type BatchControlName = keyof typeof BATCH_CONTROLS;

/** The controls of a whole batch, each served at POST .../subagent-batches/{id}/{action}. */
export const BATCH_ACTIONS = ["pause", "resume", "cancel"] as const satisfies readonly BatchControlName[];
export type BatchAction = (typeof BATCH_ACTIONS)[number];

export function isBatchAction(value: string): value is BatchAction {
  return (BATCH_ACTIONS as readonly string[]).includes(value);
}

/** Whether the control moves a batch in this status (an `already` status is not a move). */
export function controlAllowed(name: BatchControlName, status: BatchStatus): boolean {
  return (BATCH_CONTROLS[name].from as readonly BatchStatus[]).includes(status);
}

/** What a control does to a batch now: move it, leave it (already in effect), or refuse (409). */
export function planControl(
  name: BatchControlName,
  batch: ControlledBatch,
): { kind: "move"; next: BatchStatus; event: BatchEvent | null } | { kind: "already" } | { kind: "refused"; message: string } {
  const control: BatchControl = BATCH_CONTROLS[name];
  if (control.already.includes(batch.status)) return { kind: "already" };
  if (!control.from.includes(batch.status)) return { kind: "refused", message: control.refusal(batch.status) };
  return { kind: "move", next: control.next(batch), event: control.event };
}

// ---------------------------------------------------------------------------------------------
// The panel's reading of the table

/** A batch as the API projects it: enough to ask the table. */
type ProjectedBatch = { status: BatchStatus; started_at: string | null };

const controlled = (b: ProjectedBatch): ControlledBatch => ({ status: b.status, started: b.started_at !== null });

/** Which batch controls a status allows; every control needs a live worker to take effect. */
export function allowedControls(status: BatchStatus, workerAlive: boolean): Record<BatchAction, boolean> {
  return {
    pause: workerAlive && controlAllowed("pause", status),
    resume: workerAlive && controlAllowed("resume", status),
    cancel: workerAlive && controlAllowed("cancel", status),
  };
}

/** Retry re-queues a failed item in a batch whose status allows it. */
export function canRetryItem(item: string, batch: BatchStatus, workerAlive: boolean): boolean {
  return workerAlive && item === "failed" && controlAllowed("retry", batch);
}

/** The status a control moves a batch to at once, shown optimistically until the server answers. */
export function optimisticStatus<B extends ProjectedBatch>(action: BatchAction, batch: B): B {
  const plan = planControl(action, controlled(batch));
  return plan.kind === "move" ? { ...batch, status: plan.next } : batch;
}
