import { type Clock, DEFAULT_SWARM_TIMINGS, type SwarmTimings, systemClock } from "./clock";

/**
 * The swarm's local scheduler: a bounded worker pool over one call's items with reactive,
 * batch-local provider backpressure. It knows nothing about runs or databases; `runAttempt`
 * starts one child and reports how it settled.
 *
 * Backpressure (all timings in SwarmTimings):
 * - the first pump launches up to `initialBurst` items at once; every later launch is at
 *   least `admissionIntervalMs` after the previous one;
 * - an attempt that fails with failure class "rate_limit" suspends its item and requeues it
 *   at the front of the queue, eligible after base, 2×base, 4×base, ... (a suspended item
 *   that is not yet due does not block items behind it);
 * - each rate limit shrinks the effective capacity by one (never below one), at most once
 *   per `shrinkIntervalMs`;
 * - after `recoveryQuietMs` without a rate limit (and since the last recovery) one slot
 *   comes back, up to the requested concurrency;
 * - a rate-limited item that is the only unfinished item fails at once instead of waiting,
 *   and so does one that has used `maxRateLimitRetries` retries.
 */

export interface AttemptOutcome {
  status: "completed" | "failed" | "cancelled";
  failureClass?: string | null;
  runId?: string | null;
}

export interface AttemptRequest<T> {
  index: number;
  item: T;
  /** 1-based attempt number. */
  attempt: number;
  /** Run id of the previous attempt when this is a retry. */
  retryOfRunId: string | null;
  signal: AbortSignal;
}

export type SchedulerEvent =
  | { type: "item_queued"; index: number; attempt: number }
  | { type: "item_started"; index: number; attempt: number; retryOfRunId: string | null }
  | { type: "item_suspended"; index: number; attempt: number; delayMs: number; runId: string | null }
  | { type: "capacity_changed"; direction: "down" | "up"; effective: number; previous: number }
  | {
      type: "item_settled";
      index: number;
      status: "completed" | "failed" | "cancelled";
      reason: SettleReason;
      attempts: number;
    };

export type SettleReason =
  | "settled"
  | "rate_limit_alone"
  | "rate_limit_exhausted"
  | "cancelled_before_start"
  | "cancelled_while_suspended"
  | "cancelled_while_running";

export interface ItemSettlement<O extends AttemptOutcome> {
  index: number;
  status: "completed" | "failed" | "cancelled";
  reason: SettleReason;
  /** Outcome of the last attempt (null when nothing started). */
  outcome: O | null;
  attempts: number;
  firstStartedAt: number | null;
  settledAt: number;
}

export interface ScheduleOptions<T, O extends AttemptOutcome> {
  items: readonly T[];
  concurrency: number;
  signal: AbortSignal;
  runAttempt: (request: AttemptRequest<T>) => Promise<O>;
  /** Turns a thrown error into an outcome (runAttempt should not throw, but may). */
  onAttemptError: (error: unknown, request: AttemptRequest<T>) => O;
  onEvent?: (event: SchedulerEvent) => void;
  timings?: Partial<SwarmTimings>;
  clock?: Clock;
}

export interface ScheduleResult<O extends AttemptOutcome> {
  settlements: ItemSettlement<O>[];
  cancelled: boolean;
  effectiveCapacity: number;
}

type SlotState = "queued" | "running" | "suspended" | "done";

interface Slot<O extends AttemptOutcome> {
  index: number;
  state: SlotState;
  attempts: number;
  retries: number;
  readyAt: number;
  lastOutcome: O | null;
  firstStartedAt: number | null;
  settlement?: ItemSettlement<O>;
}

export function runSchedule<T, O extends AttemptOutcome>(options: ScheduleOptions<T, O>): Promise<ScheduleResult<O>> {
  return new Promise<ScheduleResult<O>>((resolve) => new Schedule(options, resolve).start());
}

/** One run of the schedule: its slots, queue, pacing and adaptive capacity. */
class Schedule<T, O extends AttemptOutcome> {
  private readonly timings: SwarmTimings;
  private readonly clock: Clock;
  private readonly concurrency: number;
  private readonly slots: Slot<O>[];
  /** Indices waiting to launch, front first. */
  private readonly queue: number[];
  private effective: number;
  private running = 0;
  private firstPump = true;
  private lastLaunchAt: number | null = null;
  private lastRateLimitAt: number | null = null;
  private lastShrinkAt: number | null = null;
  private lastRecoveryAt: number | null = null;
  private wake: unknown = null;
  private aborted = false;
  private finished = false;

  constructor(
    private readonly options: ScheduleOptions<T, O>,
    private readonly resolve: (result: ScheduleResult<O>) => void,
  ) {
    this.timings = { ...DEFAULT_SWARM_TIMINGS, ...options.timings };
    this.clock = options.clock ?? systemClock;
    this.concurrency = Math.max(1, Math.floor(options.concurrency));
    this.effective = this.concurrency;
    this.slots = options.items.map((_, index) => ({
      index,
      state: "queued",
      attempts: 0,
      retries: 0,
      readyAt: 0,
      lastOutcome: null,
      firstStartedAt: null,
    }));
    this.queue = this.slots.map((s) => s.index);
  }

  start(): void {
    const { signal } = this.options;
    for (const slot of this.slots) this.emit({ type: "item_queued", index: slot.index, attempt: 1 });
    if (signal.aborted) this.onAbort();
    else {
      signal.addEventListener("abort", this.onAbort, { once: true });
      this.pump();
    }
  }

  private emit(event: SchedulerEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch {
      // Tracing must never break scheduling.
    }
  }

  private finishIfDone(): void {
    if (this.finished || this.running > 0 || this.slots.some((s) => s.state !== "done")) return;
    this.finished = true;
    this.clearWake();
    this.options.signal.removeEventListener("abort", this.onAbort);
    this.resolve({
      settlements: this.slots.map((s) => s.settlement as ItemSettlement<O>),
      cancelled: this.aborted,
      effectiveCapacity: this.effective,
    });
  }

  private settle(slot: Slot<O>, status: ItemSettlement<O>["status"], reason: SettleReason): void {
    slot.state = "done";
    slot.settlement = {
      index: slot.index,
      status,
      reason,
      outcome: slot.lastOutcome,
      attempts: slot.attempts,
      firstStartedAt: slot.firstStartedAt,
      settledAt: this.clock.now(),
    };
    this.emit({ type: "item_settled", index: slot.index, status, reason, attempts: slot.attempts });
  }

  private clearWake(): void {
    if (this.wake !== null) this.clock.clearTimeout(this.wake);
    this.wake = null;
  }

  private unfinishedOthers(slot: Slot<O>): boolean {
    return this.slots.some((s) => s !== slot && s.state !== "done");
  }

  private maybeRecover(now: number): void {
    if (this.effective >= this.concurrency || this.lastRateLimitAt === null) return;
    const since = Math.max(this.lastRateLimitAt, this.lastRecoveryAt ?? Number.NEGATIVE_INFINITY);
    if (now - since < this.timings.recoveryQuietMs) return;
    const previous = this.effective;
    this.effective += 1;
    this.lastRecoveryAt = now;
    this.emit({ type: "capacity_changed", direction: "up", effective: this.effective, previous });
  }

  private maybeShrink(now: number): void {
    if (this.effective <= 1) return;
    if (this.lastShrinkAt !== null && now - this.lastShrinkAt < this.timings.shrinkIntervalMs) return;
    const previous = this.effective;
    this.effective -= 1;
    this.lastShrinkAt = now;
    this.emit({ type: "capacity_changed", direction: "down", effective: this.effective, previous });
  }

  private launch(slot: Slot<O>, now: number): void {
    const { signal } = this.options;
    this.queue.splice(this.queue.indexOf(slot.index), 1);
    const retryOfRunId = slot.attempts > 0 ? (slot.lastOutcome?.runId ?? null) : null;
    slot.state = "running";
    slot.attempts += 1;
    slot.firstStartedAt ??= now;
    this.running += 1;
    this.lastLaunchAt = now;
    // One signal per attempt, linked to the parent's, so listeners never pile up on it.
    const attemptAbort = new AbortController();
    const forward = () => attemptAbort.abort(signal.reason);
    signal.addEventListener("abort", forward, { once: true });
    const request: AttemptRequest<T> = {
      index: slot.index,
      item: this.options.items[slot.index],
      attempt: slot.attempts,
      retryOfRunId,
      signal: attemptAbort.signal,
    };
    this.emit({ type: "item_started", index: slot.index, attempt: slot.attempts, retryOfRunId });
    let promise: Promise<O>;
    try {
      promise = Promise.resolve(this.options.runAttempt(request));
    } catch (error) {
      promise = Promise.reject(error);
    }
    promise
      .catch((error: unknown) => this.options.onAttemptError(error, request))
      .then((outcome) => {
        signal.removeEventListener("abort", forward);
        this.onAttemptSettled(slot, outcome);
      });
  }

  private onAttemptSettled(slot: Slot<O>, outcome: O): void {
    this.running -= 1;
    slot.lastOutcome = outcome;
    const now = this.clock.now();
    if (this.aborted) {
      // Parent cancellation: a child that still finished keeps its result.
      if (outcome.status === "completed") this.settle(slot, "completed", "settled");
      else this.settle(slot, "cancelled", "cancelled_while_running");
      this.finishIfDone();
      return;
    }
    if (outcome.status === "failed" && outcome.failureClass === "rate_limit") {
      this.lastRateLimitAt = now;
      this.maybeShrink(now);
      if (!this.unfinishedOthers(slot)) this.settle(slot, "failed", "rate_limit_alone");
      else if (slot.retries >= this.timings.maxRateLimitRetries) this.settle(slot, "failed", "rate_limit_exhausted");
      else {
        slot.retries += 1;
        const delayMs = this.timings.retryBaseDelayMs * 2 ** (slot.retries - 1);
        slot.state = "suspended";
        slot.readyAt = now + delayMs;
        this.queue.unshift(slot.index);
        this.emit({ type: "item_suspended", index: slot.index, attempt: slot.attempts, delayMs, runId: outcome.runId ?? null });
      }
    } else {
      this.settle(slot, outcome.status, "settled");
    }
    this.pump();
  }

  private pickReady(now: number): Slot<O> | undefined {
    for (const index of this.queue) {
      const slot = this.slots[index];
      if (slot.readyAt <= now) return slot;
    }
    return undefined;
  }

  private pump(): void {
    if (this.finished || this.aborted) return;
    this.clearWake();
    const now = this.clock.now();
    this.maybeRecover(now);
    let burst = this.firstPump ? Math.max(0, Math.floor(this.timings.initialBurst)) : 0;
    while (this.running < this.effective) {
      const next = this.pickReady(now);
      if (!next) break;
      const paced = burst <= 0 && this.lastLaunchAt !== null && now < this.lastLaunchAt + this.timings.admissionIntervalMs;
      if (paced) break;
      burst -= 1;
      this.launch(next, now);
    }
    this.firstPump = false;
    this.finishIfDone();
    if (!this.finished) this.scheduleWake(now);
  }

  private scheduleWake(now: number): void {
    let at = Number.POSITIVE_INFINITY;
    if (this.running < this.effective && this.queue.length > 0) {
      let ready = Number.POSITIVE_INFINITY;
      for (const index of this.queue) ready = Math.min(ready, this.slots[index].readyAt);
      const admission = this.lastLaunchAt === null ? now : this.lastLaunchAt + this.timings.admissionIntervalMs;
      at = Math.max(ready, admission);
    }
    if (this.effective < this.concurrency && this.lastRateLimitAt !== null) {
      const since = Math.max(this.lastRateLimitAt, this.lastRecoveryAt ?? Number.NEGATIVE_INFINITY);
      at = Math.min(at, since + this.timings.recoveryQuietMs);
    }
    if (at === Number.POSITIVE_INFINITY) return;
    this.wake = this.clock.setTimeout(
      () => {
        this.wake = null;
        this.pump();
      },
      Math.max(0, at - now),
    );
  }

  private readonly onAbort = (): void => {
    if (this.finished || this.aborted) return;
    this.aborted = true;
    this.clearWake();
    // Queued items never start; suspended ones (a retry pending) are not started again.
    for (const slot of this.slots) {
      if (slot.state === "queued") this.settle(slot, "cancelled", "cancelled_before_start");
      else if (slot.state === "suspended") this.settle(slot, "cancelled", "cancelled_while_suspended");
    }
    this.queue.length = 0;
    // Running attempts see the same signal; we join them in onAttemptSettled.
    this.finishIfDone();
  };
}
