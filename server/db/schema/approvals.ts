import { sql } from "drizzle-orm";
import { index, jsonb, pgTable, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { subagentBatches } from "./batches";
import { ownedRowColumns, } from "./auth";
import { threads } from "./chat";
import { at, createdAtColumn, } from "./columns";

export const APPROVAL_STATUSES = ["pending", "approved", "denied"] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];

/**
 * Who asked: a batch item (parks; settle.sql), the lead of a chat thread (its response ends with
 * the AI SDK's approval request; the decision starts a continuation) or a chat child (`task` or
 * swarm child: it waits in its tool call, without its capacity slot).
 */
export const APPROVAL_KINDS = ["batch_item", "lead", "child"] as const;
export type ApprovalKind = (typeof APPROVAL_KINDS)[number];

/**
 * A tool call that waits for a person (tools.require_approval), one row per call: the AI SDK's
 * approval request, then the decision. A batch item's rows name the item and the parked
 * attempt's run (whose stored transcript the next attempt resumes from); the decision and the
 * timeout sweep are server/batches/sql/approvals.sql. Chat rows (lead, child) name their thread
 * and carry the sha256 of their arguments: a call runs only with the arguments approved
 * (server/agent/chat-approvals.ts).
 */
export const toolApprovals = pgTable(
  "tool_approvals",
  {
    ...ownedRowColumns(),
    /** Batch items: their batch and item (no item foreign key: items leave with their batch's trigger). */
    batchId: uuid("batch_id").references(() => subagentBatches.id, { onDelete: "cascade" }),
    itemId: uuid("item_id"),
    kind: text("kind", { enum: APPROVAL_KINDS }).notNull().default("batch_item"),
    /** Chat rows: the thread whose card shows the call. */
    threadId: uuid("thread_id").references(() => threads.id, { onDelete: "cascade" }),
    /** The run that asked (a parked batch item's attempt, or a chat child). */
    runId: uuid("run_id").notNull(),
    approvalId: text("approval_id").notNull(),
    toolCallId: text("tool_call_id").notNull(),
    /** The tool's name as the model sees it. */
    toolName: text("tool_name").notNull(),
    input: jsonb("input"),
    /** Chat rows: sha256 (hex) of the arguments' canonical JSON, checked again when the call runs. */
    inputHash: text("input_hash"),
    /** Chat rows: created_at + tools.approval_timeout_seconds; then the call is denied. */
    expiresAt: at("expires_at"),
    /** Lead rows: when the continuation that carries the decision to the model was started (once). */
    continuedAt: at("continued_at"),
    status: text("status", { enum: APPROVAL_STATUSES }).notNull().default("pending"),
    reason: text("reason"),
    /** A lead's batch_task: the estimate the card shows, and the person's choice beyond approve ("pilot"). */
    detail: jsonb("detail"),
    option: text("option"),
    createdAt: createdAtColumn(),
    decidedAt: at("decided_at"),
  },
  (t) => [
    index("tool_approvals_item_idx").on(t.itemId),
    index("tool_approvals_batch_pending_idx")
      .on(t.batchId, t.toolName)
      .where(sql`status = 'pending'`),
    index("tool_approvals_thread_idx")
      .on(t.threadId, t.createdAt)
      .where(sql`thread_id is not null`),
    uniqueIndex("tool_approvals_chat_call_uq")
      .on(t.runId, t.toolCallId)
      .where(sql`kind <> 'batch_item'`),
    index("tool_approvals_lead_open_idx")
      .on(t.threadId)
      .where(sql`kind = 'lead' and continued_at is null`),
    index("tool_approvals_pending_idx")
      .on(t.createdAt)
      .where(sql`status = 'pending'`),
  ],
);
