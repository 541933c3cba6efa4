import { type AttemptStage, attemptThrew, runChildAttempt } from "./attempt";
import type { Clock } from "./clock";
import { runSchedule, type ScheduleResult, type SchedulerEvent } from "./scheduler";
import type { ChildOutcome, SwarmContext, SwarmEntry } from "./types";

/**
 * The scheduler stage: the entries through the local scheduler (./scheduler.ts) at the call's
 * concurrency, each attempt run by the attempt stage, and every scheduler event projected onto
 * the live rows and the trace.
 */

export interface SchedulingStage extends AttemptStage {
  entries: SwarmEntry[];
  concurrency: number;
  signal: AbortSignal;
  clock: Clock;
  timings?: SwarmContext["timings"];
}

export function scheduleEntries(stage: SchedulingStage): Promise<ScheduleResult<ChildOutcome>> {
  const { rows } = stage;
  return runSchedule<SwarmEntry, ChildOutcome>({
    items: stage.entries,
    concurrency: stage.concurrency,
    signal: stage.signal,
    timings: stage.timings,
    clock: stage.clock,
    runAttempt: async (req) => {
      const outcome = await runChildAttempt(stage, req);
      rows.lastOutcome[req.index] = outcome;
      return outcome;
    },
    onAttemptError: (err, req) => {
      const outcome = attemptThrew(stage, err, req);
      rows.lastOutcome[req.index] = outcome;
      return outcome;
    },
    onEvent: (event) => projectEvent(stage, event),
  });
}

/** One scheduler event onto the rows and the trace. */
export function projectEvent(stage: Pick<SchedulingStage, "entries" | "rows" | "trace" | "clock">, event: SchedulerEvent): void {
  const { rows, trace, clock } = stage;
  switch (event.type) {
    case "item_queued":
      trace.record("item_queued", { item_id: stage.entries[event.index].item_id, attempt: event.attempt });
      break;
    case "item_started": {
      const row = rows.rows[event.index];
      row.status = "running";
      row.attempts = event.attempt;
      rows.firstStart[event.index] ??= clock.now();
      trace.record("item_started", {
        item_id: row.item_id,
        attempt: event.attempt,
        retry_of_run_id: event.retryOfRunId,
        resumed_from_run_id: event.attempt === 1 ? row.resumed_from_run_id : null,
      });
      break;
    }
    case "item_suspended": {
      const row = rows.rows[event.index];
      row.status = "suspended";
      row.failure_class = "rate_limit";
      trace.record("item_suspended", {
        item_id: row.item_id,
        attempt: event.attempt,
        delay_ms: event.delayMs,
        failure_class: "rate_limit",
        child_run_id: event.runId,
      });
      break;
    }
    case "capacity_changed":
      rows.effective = event.effective;
      trace.record("capacity_changed", {
        direction: event.direction,
        effective_capacity: event.effective,
        previous_capacity: event.previous,
      });
      break;
    case "item_settled":
      // Live row now; the final settlement writes the same fields.
      rows.finishRow(event.index, {
        status: event.status,
        reason: event.reason,
        attempts: event.attempts,
        firstStartedAt: rows.firstStart[event.index],
        settledAt: clock.now(),
      });
      trace.publishSoon();
      break;
  }
}
