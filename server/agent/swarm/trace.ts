import type { UIMessageStreamWriter } from "ai";
import type { Db } from "@/server/db/client";
import { storable } from "@/server/db/storable";
import { runEvents } from "@/server/db/schema";
import type { Logger } from "@/server/log";
import type { SwarmLiveData, SwarmResult, SwarmTraceEntry } from "@/lib/api/swarm";

/**
 * Swarm diagnostics. Every boundary becomes a structured run_events row on the lead run
 * (type "swarm.<stage>", data names the boundary with stable fields) and a compact entry in
 * the live `data-swarm` UI part. Run rows stay the authority; these are projections only.
 */

export type SwarmBoundary =
  | "subagent_tool_admission"
  | "local_swarm_concurrency"
  | "shared_child_run_permit"
  | "child_run_execution";

export type SwarmTraceType =
  | "tool_admission_rejected"
  | "item_queued"
  | "item_started"
  | "item_suspended"
  | "capacity_changed"
  | "shared_capacity_waiting"
  | "child_started"
  | "child_completed"
  | "swarm_completed";

const BOUNDARY: Record<SwarmTraceType, SwarmBoundary | null> = {
  tool_admission_rejected: "subagent_tool_admission",
  item_queued: "local_swarm_concurrency",
  item_started: "local_swarm_concurrency",
  item_suspended: "local_swarm_concurrency",
  capacity_changed: "local_swarm_concurrency",
  shared_capacity_waiting: "shared_child_run_permit",
  child_started: "child_run_execution",
  child_completed: "child_run_execution",
  swarm_completed: null,
};

/** Entries kept in the live part; the run_events rows keep everything. */
export const LIVE_TRACE_LIMIT = 200;
/** Live parts are rewritten whole, so bursts are coalesced to at most one write per interval. */
export const LIVE_MIN_INTERVAL_MS = 100;

export interface TraceFields {
  item_id?: string;
  attempt?: number;
  delay_ms?: number;
  direction?: "down" | "up";
  effective_capacity?: number;
  previous_capacity?: number;
  status?: string;
  failure_class?: string | null;
  child_run_id?: string | null;
  retry_of_run_id?: string | null;
  resumed_from_run_id?: string | null;
  duration_ms?: number;
  running?: number;
  queued?: number;
  reason?: string;
  aggregate?: unknown;
}

export class SwarmTrace {
  private readonly entries: SwarmTraceEntry[] = [];
  private dropped = 0;
  private pending: Array<typeof runEvents.$inferInsert> = [];
  private writing: Promise<void> = Promise.resolve();
  private liveScheduled = false;
  private liveTimer: ReturnType<typeof setTimeout> | undefined;
  private lastPublishAt = Number.NEGATIVE_INFINITY;
  private snapshot: (() => SwarmResult) | null = null;

  constructor(
    private opts: {
      db: Db;
      leadRunId: string;
      toolCallId: string;
      writer?: UIMessageStreamWriter;
      now: () => number;
      startedAt: number;
      logger: Logger;
    },
  ) {}

  /** Where live updates go (none for a background swarm: the response that started it has ended). */
  setWriter(writer: UIMessageStreamWriter | undefined) {
    this.opts.writer = writer;
  }

  /** Where live updates read the current rows from. */
  attach(snapshot: () => SwarmResult) {
    this.snapshot = snapshot;
  }

  record(type: SwarmTraceType, fields: TraceFields = {}): void {
    const t = Math.max(0, Math.round(this.opts.now() - this.opts.startedAt));
    const boundary = BOUNDARY[type];
    const stageKey = boundary === "shared_child_run_permit" || boundary === "child_run_execution" ? "stage" : "swarm_stage";
    const stage = type === "swarm_completed" ? "batch_completed" : type.replace(/^child_|^shared_capacity_/, "");
    this.pending.push({
      runId: this.opts.leadRunId,
      type: `swarm.${type}`,
      data: { tool_call_id: this.opts.toolCallId, ...(boundary ? { boundary } : {}), [stageKey]: stage, t_ms: t, ...fields },
    });
    this.flushSoon();
    if (type !== "swarm_completed") {
      const detail =
        fields.reason ??
        (fields.running !== undefined
          ? `process slots busy: ${fields.running} running, ${fields.queued ?? 0} waiting`
          : undefined);
      const entry: SwarmTraceEntry = { t, type };
      if (fields.item_id !== undefined) entry.item_id = fields.item_id;
      if (fields.attempt !== undefined) entry.attempt = fields.attempt;
      if (fields.delay_ms !== undefined) entry.delay_ms = fields.delay_ms;
      if (fields.direction !== undefined) entry.direction = fields.direction;
      if (fields.effective_capacity !== undefined) entry.effective_capacity = fields.effective_capacity;
      if (fields.status !== undefined) entry.status = fields.status;
      if (fields.failure_class !== undefined) entry.failure_class = fields.failure_class;
      if (fields.child_run_id !== undefined) entry.child_run_id = fields.child_run_id;
      if (detail !== undefined) entry.detail = detail.slice(0, 300);
      this.entries.push(entry);
      if (this.entries.length > LIVE_TRACE_LIMIT) {
        this.entries.shift();
        this.dropped += 1;
      }
    }
    this.publishSoon();
  }

  /** The live UI part now (and the final one). */
  publish(): void {
    clearTimeout(this.liveTimer);
    this.liveTimer = undefined;
    this.liveScheduled = false;
    this.lastPublishAt = Date.now();
    if (!this.opts.writer || !this.snapshot) return;
    const data: SwarmLiveData = {
      ...this.snapshot(),
      tool_call_id: this.opts.toolCallId,
      trace: [...this.entries],
      trace_dropped: this.dropped,
    };
    try {
      this.opts.writer.write({ type: "data-swarm", id: this.opts.toolCallId, data });
    } catch (err) {
      // The client may be gone (Stop); the tool result still carries the outcome.
      this.opts.logger.debug({ err }, "swarm live update dropped");
    }
  }

  /** Coalesces bursts of events into one UI write (the final publish() is never delayed). */
  publishSoon(): void {
    if (this.liveScheduled || !this.opts.writer) return;
    this.liveScheduled = true;
    const wait = this.lastPublishAt + LIVE_MIN_INTERVAL_MS - Date.now();
    if (wait <= 0)
      queueMicrotask(() => {
        if (this.liveScheduled) this.publish();
      });
    else
      this.liveTimer = setTimeout(() => {
        if (this.liveScheduled) this.publish();
      }, wait);
  }

  private flushSoon(): void {
    this.writing = this.writing.then(async () => {
      if (this.pending.length === 0) return;
      const batch = this.pending;
      this.pending = [];
      try {
        await this.opts.db.insert(runEvents).values(storable(batch));
      } catch (err) {
        this.opts.logger.warn({ err, events: batch.length }, "could not record swarm trace events");
      }
    });
  }

  /** Waits until every recorded event is in the database. */
  async flush(): Promise<void> {
    this.flushSoon();
    await this.writing;
  }

  get liveEntries(): readonly SwarmTraceEntry[] {
    return this.entries;
  }
}
