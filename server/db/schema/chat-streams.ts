import { sql } from "drizzle-orm";
import { index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { ownerColumn } from "./auth";
import { threadColumn } from "./chat";
import { at, createdAtColumn, idColumn, parentColumn } from "./columns";
import { agentRuns } from "./runs";

export const CHAT_STREAM_STATUSES = ["active", "finished"] as const;

/**
 * One lead response of a thread as a resumable UI message stream. The partial unique index
 * is the per-thread lock: at most one active response per thread, whichever web process runs it.
 */
export const chatStreams = pgTable(
  "chat_streams",
  {
    id: idColumn(),
    threadId: threadColumn(),
    userId: ownerColumn(),
    /** Set once the lead run row exists (right after the lock is taken). */
    runId: uuid("run_id").references(() => agentRuns.id, { onDelete: "set null" }),
    /** The assistant message the stream builds (its id is stored with the finished message). */
    messageId: text("message_id").notNull(),
    status: text("status", { enum: CHAT_STREAM_STATUSES }).notNull().default("active"),
    createdAt: createdAtColumn(),
    finishedAt: at("finished_at"),
  },
  (t) => [
    uniqueIndex("chat_streams_one_active_per_thread").on(t.threadId).where(sql`${t.status} = 'active'`),
    index("chat_streams_finished_idx").on(t.finishedAt),
  ],
);

/** The UI message stream chunks of a response, in order; readers replay them from any sequence number. */
export const chatStreamChunks = pgTable(
  "chat_stream_chunks",
  {
    streamId: parentColumn("stream_id", () => chatStreams.id),
    seq: integer("seq").notNull(),
    chunk: jsonb("chunk").notNull(),
  },
  (t) => [primaryKey({ columns: [t.streamId, t.seq] })],
);
