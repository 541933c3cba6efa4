import { sql } from "drizzle-orm";
import { boolean, index, jsonb, pgTable, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { ownerColumn } from "./auth";
import { threadColumn } from "./chat";
import { at, parentColumn, serialIdColumn, wakeupColumns } from "./columns";
import { agentRuns } from "./runs";

/**
 * Background delegation (`task` / `agent_swarm` with `background: true`): one row per such
 * call, written with its child runs before the tool answers. The process running the children
 * sets `settled_at` (with the result) when the last one settles; a process that finds the row
 * unsettled while its owner no longer heartbeats marks the children interrupted and settles it.
 * A settled row is then claimed by one web process with a lease, which starts the lead once in
 * the thread (metadata `{ trigger: "children_settled", run_ids }`) and marks it done.
 */
export const childWakeups = pgTable(
  "child_wakeups",
  {
    id: serialIdColumn(),
    threadId: threadColumn(),
    userId: ownerColumn(),
    /** The lead run whose tool call started the children (their parent). */
    leadRunId: parentColumn("lead_run_id", () => agentRuns.id),
    toolCallId: text("tool_call_id").notNull(),
    tool: text("tool", { enum: ["task", "agent_swarm"] }).notNull(),
    /** Every child run of the call, as the tool answered them (first attempts; retries link to these). */
    runIds: uuid("run_ids").array().notNull(),
    /** The process that runs the children (INSTANCE_ID); its heartbeat says whether they still run. */
    ownerInstance: text("owner_instance").notNull(),
    settledAt: at("settled_at"),
    /** The process running the children died: what had not finished was marked interrupted. */
    interrupted: boolean("interrupted").notNull().default(false),
    /** Set with settled_at by the running process: what the lead reads (ChildrenSettledNotice). */
    result: jsonb("result").$type<Record<string, unknown>>(),
    ...wakeupColumns(),
  },
  (t) => [
    uniqueIndex("child_wakeups_call_uq").on(t.leadRunId, t.toolCallId),
    index("child_wakeups_pending_idx").on(t.nextAttemptAt).where(sql`done_at is null`),
    index("child_wakeups_thread_idx").on(t.threadId).where(sql`done_at is null`),
    // A user's replies of the last minute (the open chats' watch: server/chat/wakeup-watch.ts).
    index("child_wakeups_user_done_idx").on(t.userId, t.doneAt),
  ],
);
