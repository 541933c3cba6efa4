import type { SwarmAggregate, SwarmItemRow, SwarmResult } from "@/lib/api/swarm";
import type { Clock } from "./clock";
import type { ItemSettlement, ScheduleResult } from "./scheduler";
import { bound, type ChildOutcome, type SwarmEntry } from "./types";

/**
 * The settlement stage: the call's rows (one per entry, in input order) and its aggregate, as the
 * live part shows them while items run and as the result returns them. An item's row is written
 * when the scheduler settles it and again, with the same fields, from the final settlements.
 */

/** Total characters of child answers one result may carry, spread over its rows. */
export const SUMMARY_BUDGET_CHARS = 24_000;
export const SUMMARY_MAX_CHARS = 2_000;
export const SUMMARY_MIN_CHARS = 300;
export const ERROR_MAX_CHARS = 300;

export type RowSettlement = Pick<ItemSettlement<ChildOutcome>, "status" | "reason" | "attempts" | "firstStartedAt" | "settledAt">;

export class SwarmRows {
  readonly rows: SwarmItemRow[];
  readonly usage = { input_tokens: 0, output_tokens: 0 };
  /** The run of each entry's attempt in flight (null until its row exists). */
  readonly currentRunId: Array<string | null>;
  /** When each entry's first attempt started. */
  readonly firstStart: Array<number | null>;
  /** Each entry's last attempt, as the attempt stage answered it. */
  readonly lastOutcome: Array<ChildOutcome | null>;
  /** The scheduler's effective capacity (the requested concurrency until it shrinks). */
  effective: number;
  private finalStatus: SwarmAggregate["status"] = "running";
  private readonly summaryMax: number;

  constructor(
    entries: readonly SwarmEntry[],
    private readonly concurrency: number,
    private readonly clock: Clock,
    private readonly startedAt: number,
  ) {
    this.rows = entries.map((e) => ({
      item_id: e.item_id,
      status: "queued",
      profile: e.profile,
      duration_ms: null,
      failure_class: null,
      summary: null,
      error: null,
      child_run_id: null,
      attempts: 0,
      resumed_from_run_id: e.resumedFrom,
      usage: { input_tokens: 0, output_tokens: 0 },
    }));
    this.currentRunId = entries.map(() => null);
    this.firstStart = entries.map(() => null);
    this.lastOutcome = entries.map(() => null);
    this.effective = concurrency;
    this.summaryMax = Math.max(
      SUMMARY_MIN_CHARS,
      Math.min(SUMMARY_MAX_CHARS, Math.floor(SUMMARY_BUDGET_CHARS / Math.max(1, entries.length))),
    );
  }

  aggregate(): SwarmAggregate {
    const { rows } = this;
    const counts = { total: rows.length, queued: 0, running: 0, suspended: 0, completed: 0, failed: 0, cancelled: 0 };
    for (const r of rows) counts[r.status] += 1;
    return {
      status: this.finalStatus,
      counts,
      started: rows.filter((r) => r.attempts > 0).length,
      concurrency: this.concurrency,
      effective_capacity: this.effective,
      duration_ms: Math.max(0, Math.round(this.clock.now() - this.startedAt)),
      usage: { ...this.usage },
    };
  }

  snapshot(): SwarmResult {
    return { aggregate: this.aggregate(), items: this.rows.map((r) => ({ ...r, ...(r.usage ? { usage: { ...r.usage } } : {}) })) };
  }

  /** One item's row from its settlement and its last attempt. */
  finishRow(index: number, settlement: RowSettlement): void {
    const row = this.rows[index];
    const outcome = this.lastOutcome[index];
    row.status = settlement.status;
    row.attempts = settlement.attempts;
    row.duration_ms =
      settlement.firstStartedAt === null ? null : Math.max(0, Math.round(settlement.settledAt - settlement.firstStartedAt));
    row.child_run_id = outcome?.runId ?? this.currentRunId[index] ?? row.child_run_id;
    row.summary = outcome?.text ? bound(outcome.text, this.summaryMax) : null;
    row.failure_class = settlement.status === "failed" ? (outcome?.failureClass ?? "unknown") : null;
    row.error = rowError(settlement, outcome);
  }

  /** Every row from the final settlements, then the call's status: the result. */
  settle(result: ScheduleResult<ChildOutcome>): SwarmResult {
    for (const s of result.settlements) this.finishRow(s.index, s);
    const { counts } = this.aggregate();
    this.finalStatus = result.cancelled
      ? "cancelled"
      : counts.completed === counts.total
        ? "completed"
        : counts.failed + counts.cancelled === counts.total && counts.completed === 0
          ? "failed"
          : "partial";
    return this.snapshot();
  }
}

function rowError(settlement: RowSettlement, outcome: ChildOutcome | null): string | null {
  const n = settlement.attempts;
  switch (settlement.reason) {
    case "rate_limit_alone":
      return `rate limited by the provider after ${n} attempt${n === 1 ? "" : "s"}; no other item was left to wait for, so it was not retried again`;
    case "rate_limit_exhausted":
      return `rate limited by the provider on all ${n} attempts`;
    case "cancelled_before_start":
      return "cancelled before it started";
    case "cancelled_while_suspended":
      return "cancelled while waiting to retry after a rate limit";
    case "cancelled_while_running":
      return "cancelled while running";
    default:
      return settlement.status === "completed" ? null : outcome?.error ? bound(outcome.error, ERROR_MAX_CHARS) : null;
  }
}
