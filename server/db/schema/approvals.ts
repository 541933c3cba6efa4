import { sql } from "drizzle-orm";
import { index, jsonb, pgTable, text, uuid } from "drizzle-orm/pg-core";
import { subagentBatches } from "./batches";
import { at, createdAtColumn, idColumn, ownerColumn } from "./columns";

export const APPROVAL_STATUSES = ["pending", "approved", "denied"] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];

/**
 * A tool call that waits for a person (tools.require_approval), one row per call: the AI SDK's
 * approval request, then the decision. A batch item's rows name the item and the parked
 * attempt's run (whose stored transcript the next attempt resumes from); the decision and the
 * timeout sweep are server/batches/sql/approvals.sql.
 */
export const toolApprovals = pgTable(
  "tool_approvals",
  {
    id: idColumn(),
    userId: ownerColumn(),
    /** Batch items: their batch and item (no item foreign key: items leave with their batch's trigger). */
    batchId: uuid("batch_id").references(() => subagentBatches.id, { onDelete: "cascade" }),
    itemId: uuid("item_id"),
    /** The run that asked (a parked batch item's attempt, or a chat child). */
    runId: uuid("run_id").notNull(),
    approvalId: text("approval_id").notNull(),
    toolCallId: text("tool_call_id").notNull(),
    /** The tool's name as the model sees it. */
    toolName: text("tool_name").notNull(),
    input: jsonb("input"),
    status: text("status", { enum: APPROVAL_STATUSES }).notNull().default("pending"),
    reason: text("reason"),
    createdAt: createdAtColumn(),
    decidedAt: at("decided_at"),
  },
  (t) => [
    index("tool_approvals_item_idx").on(t.itemId),
    index("tool_approvals_batch_pending_idx")
      .on(t.batchId, t.toolName)
      .where(sql`status = 'pending'`),
    index("tool_approvals_pending_idx")
      .on(t.createdAt)
      .where(sql`status = 'pending'`),
  ],
);
