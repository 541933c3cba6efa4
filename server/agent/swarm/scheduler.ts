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
  const timings: SwarmTimings = { ...DEFAULT_SWARM_TIMINGS, ...options.timings };
  const clock = options.clock ?? systemClock;
  const { items, signal } = options;
  const concurrency = Math.max(1, Math.floor(options.concurrency));
  const emit = (event: SchedulerEvent) => {
    try {
      options.onEvent?.(event);
    } catch {
      // Tracing must never break scheduling.
    }
  };

  const slots: Slot<O>[] = items.map((_, index) => ({
    index,
    state: "queued",
    attempts: 0,
    retries: 0,
    readyAt: 0,
    lastOutcome: null,
    firstStartedAt: null,
  }));
  /** Indices waiting to launch, front first. */
  const queue: number[] = slots.map((s) => s.index);
  let effective = concurrency;
  let running = 0;
  let firstPump = true;
  let lastLaunchAt: number | null = null;
  let lastRateLimitAt: number | null = null;
  let lastShrinkAt: number | null = null;
  let lastRecoveryAt: number | null = null;
  let wake: unknown = null;
  let aborted = false;
  let finished = false;

  return new Promise<ScheduleResult<O>>((resolve) => {
    const finishIfDone = () => {
      if (finished || running > 0 || slots.some((s) => s.state !== "done")) return;
      finished = true;
      clearWake();
      signal.removeEventListener("abort", onAbort);
      resolve({
        settlements: slots.map((s) => s.settlement as ItemSettlement<O>),
        cancelled: aborted,
        effectiveCapacity: effective,
      });
    };

    const settle = (slot: Slot<O>, status: ItemSettlement<O>["status"], reason: SettleReason) => {
      slot.state = "done";
      slot.settlement = {
        index: slot.index,
        status,
        reason,
        outcome: slot.lastOutcome,
        attempts: slot.attempts,
        firstStartedAt: slot.firstStartedAt,
        settledAt: clock.now(),
      };
      emit({ type: "item_settled", index: slot.index, status, reason, attempts: slot.attempts });
    };

    const clearWake = () => {
      if (wake !== null) clock.clearTimeout(wake);
      wake = null;
    };

    const unfinishedOthers = (slot: Slot<O>) => slots.some((s) => s !== slot && s.state !== "done");

    const maybeRecover = (now: number) => {
      if (effective >= concurrency || lastRateLimitAt === null) return;
      const since = Math.max(lastRateLimitAt, lastRecoveryAt ?? Number.NEGATIVE_INFINITY);
      if (now - since < timings.recoveryQuietMs) return;
      const previous = effective;
      effective += 1;
      lastRecoveryAt = now;
      emit({ type: "capacity_changed", direction: "up", effective, previous });
    };

    const maybeShrink = (now: number) => {
      if (effective <= 1) return;
      if (lastShrinkAt !== null && now - lastShrinkAt < timings.shrinkIntervalMs) return;
      const previous = effective;
      effective -= 1;
      lastShrinkAt = now;
      emit({ type: "capacity_changed", direction: "down", effective, previous });
    };

    const launch = (slot: Slot<O>, now: number) => {
      queue.splice(queue.indexOf(slot.index), 1);
      const retryOfRunId = slot.attempts > 0 ? (slot.lastOutcome?.runId ?? null) : null;
      slot.state = "running";
      slot.attempts += 1;
      slot.firstStartedAt ??= now;
      running += 1;
      lastLaunchAt = now;
      // One signal per attempt, linked to the parent's, so listeners never pile up on it.
      const attemptAbort = new AbortController();
      const forward = () => attemptAbort.abort(signal.reason);
      signal.addEventListener("abort", forward, { once: true });
      const request: AttemptRequest<T> = {
        index: slot.index,
        item: items[slot.index],
        attempt: slot.attempts,
        retryOfRunId,
        signal: attemptAbort.signal,
      };
      emit({ type: "item_started", index: slot.index, attempt: slot.attempts, retryOfRunId });
      let promise: Promise<O>;
      try {
        promise = Promise.resolve(options.runAttempt(request));
      } catch (error) {
        promise = Promise.reject(error);
      }
      promise
        .catch((error: unknown) => options.onAttemptError(error, request))
        .then((outcome) => {
          signal.removeEventListener("abort", forward);
          onAttemptSettled(slot, outcome);
        });
    };

    const onAttemptSettled = (slot: Slot<O>, outcome: O) => {
      running -= 1;
      slot.lastOutcome = outcome;
      const now = clock.now();
      if (aborted) {
        // Parent cancellation: a child that still finished keeps its result.
        if (outcome.status === "completed") settle(slot, "completed", "settled");
        else settle(slot, "cancelled", "cancelled_while_running");
        finishIfDone();
        return;
      }
      if (outcome.status === "failed" && outcome.failureClass === "rate_limit") {
        lastRateLimitAt = now;
        maybeShrink(now);
        if (!unfinishedOthers(slot)) settle(slot, "failed", "rate_limit_alone");
        else if (slot.retries >= timings.maxRateLimitRetries) settle(slot, "failed", "rate_limit_exhausted");
        else {
          slot.retries += 1;
          const delayMs = timings.retryBaseDelayMs * 2 ** (slot.retries - 1);
          slot.state = "suspended";
          slot.readyAt = now + delayMs;
          queue.unshift(slot.index);
          emit({ type: "item_suspended", index: slot.index, attempt: slot.attempts, delayMs, runId: outcome.runId ?? null });
        }
      } else {
        settle(slot, outcome.status, "settled");
      }
      pump();
    };

    const pickReady = (now: number): Slot<O> | undefined => {
      for (const index of queue) {
        const slot = slots[index];
        if (slot.readyAt <= now) return slot;
      }
      return undefined;
    };

    const pump = () => {
      if (finished || aborted) return;
      clearWake();
      const now = clock.now();
      maybeRecover(now);
      let burst = firstPump ? Math.max(0, Math.floor(timings.initialBurst)) : 0;
      while (running < effective) {
        const next = pickReady(now);
        if (!next) break;
        const paced = burst <= 0 && lastLaunchAt !== null && now < lastLaunchAt + timings.admissionIntervalMs;
        if (paced) break;
        burst -= 1;
        launch(next, now);
      }
      firstPump = false;
      finishIfDone();
      if (!finished) scheduleWake(now);
    };

    const scheduleWake = (now: number) => {
      let at = Number.POSITIVE_INFINITY;
      if (running < effective && queue.length > 0) {
        let ready = Number.POSITIVE_INFINITY;
        for (const index of queue) ready = Math.min(ready, slots[index].readyAt);
        const admission = lastLaunchAt === null ? now : lastLaunchAt + timings.admissionIntervalMs;
        at = Math.max(ready, admission);
      }
      if (effective < concurrency && lastRateLimitAt !== null) {
        const since = Math.max(lastRateLimitAt, lastRecoveryAt ?? Number.NEGATIVE_INFINITY);
        at = Math.min(at, since + timings.recoveryQuietMs);
      }
      if (at === Number.POSITIVE_INFINITY) return;
      wake = clock.setTimeout(
        () => {
          wake = null;
          pump();
        },
        Math.max(0, at - now),
      );
    };

    const onAbort = () => {
      if (finished || aborted) return;
      aborted = true;
      clearWake();
      // Queued items never start; suspended ones (a retry pending) are not started again.
      for (const slot of slots) {
        if (slot.state === "queued") settle(slot, "cancelled", "cancelled_before_start");
        else if (slot.state === "suspended") settle(slot, "cancelled", "cancelled_while_suspended");
      }
      queue.length = 0;
      // Running attempts see the same signal; we join them in onAttemptSettled.
      finishIfDone();
    };

    for (const slot of slots) emit({ type: "item_queued", index: slot.index, attempt: 1 });
    if (signal.aborted) onAbort();
    else {
      signal.addEventListener("abort", onAbort, { once: true });
      pump();
    }
  });
}
