import { sql } from "drizzle-orm";
import { index, integer, jsonb, pgTable, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import type { ToolCallRecord } from "../../../lib/api/runs";
import { ownedRowColumns, } from "./auth";
import { threads } from "./chat";
import { at, countColumn, createdAtColumn, parentColumn, serialIdColumn, tokenColumns } from "./columns";

export const RUN_KINDS = ["lead", "task", "swarm_child", "batch_item"] as const;
export const RUN_STATUSES = [
  "pending",
  "running",
  "completed",
  "failed",
  "cancelled",
  "timed_out",
  "interrupted",
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** Every lead-agent response and every sub-agent execution is one run row. */
export const agentRuns = pgTable(
  "agent_runs",
  {
    ...ownedRowColumns(),
    threadId: uuid("thread_id").references(() => threads.id, { onDelete: "cascade" }),
    parentRunId: uuid("parent_run_id"),
    rootRunId: uuid("root_run_id"),
    /** Link for swarm retries and resumes. */
    retryOfRunId: uuid("retry_of_run_id"),
    resumedFromRunId: uuid("resumed_from_run_id"),
    kind: text("kind", { enum: RUN_KINDS }).notNull(),
    /** Sub-agent definition name ("lead" for the lead agent). */
    definition: text("definition").notNull(),
    model: text("model").notNull(),
    toolCallId: text("tool_call_id"),
    depth: integer("depth").notNull().default(0),
    status: text("status", { enum: RUN_STATUSES }).notNull().default("pending"),
    stopReason: text("stop_reason"),
    prompt: text("prompt"),
    result: text("result"),
    error: text("error"),
    ...tokenColumns(),
    /** Model messages of the run, replayable for resume. */
    transcript: jsonb("transcript").$type<unknown[]>(),
    /** The transcript's tool calls (name, bounded previews, status, duration), in finishing order. */
    toolCalls: jsonb("tool_calls").$type<ToolCallRecord[]>(),
    /** len(tool_calls), kept so item pages and run lists count without reading the list. */
    toolCallCount: countColumn("tool_call_count"),
    /** Process instance that executes the run; restart recovery finalizes orphans by this. */
    ownerInstance: text("owner_instance"),
    createdAt: createdAtColumn(),
    startedAt: at("started_at"),
    finishedAt: at("finished_at"),
  },
  (t) => [
    index("agent_runs_thread_idx").on(t.threadId, t.createdAt),
    index("agent_runs_parent_idx").on(t.parentRunId),
    index("agent_runs_root_idx").on(t.rootRunId),
    index("agent_runs_active_idx").on(t.status, t.ownerInstance),
    // A run is resumed at most once, across every process (the swarm preflight checks first).
    uniqueIndex("agent_runs_resumed_from_uq")
      .on(t.resumedFromRunId)
      .where(sql`resumed_from_run_id is not null`),
  ],
);

/** Structured trace events recorded on a run (swarm boundaries, admission, stops). */
export const runEvents = pgTable(
  "run_events",
  {
    id: serialIdColumn(),
    runId: parentColumn("run_id", () => agentRuns.id),
    type: text("type").notNull(),
    data: jsonb("data").$type<Record<string, unknown>>().notNull().default({}),
    createdAt: createdAtColumn(),
  },
  (t) => [index("run_events_run_idx").on(t.runId, t.id)],
);
