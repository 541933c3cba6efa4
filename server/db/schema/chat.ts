import { sql } from "drizzle-orm";
import { index, jsonb, pgTable, primaryKey, text } from "drizzle-orm/pg-core";
import { ownedRowColumns, } from "./auth";
import { at, createdAtColumn, parentColumn } from "./columns";

export const threads = pgTable(
  "threads",
  {
    ...ownedRowColumns(),
    title: text("title").notNull().default("New thread"),
    createdAt: createdAtColumn(),
    updatedAt: at("updated_at").notNull().defaultNow(),
  },
  (t) => [index("threads_user_updated_idx").on(t.userId, t.updatedAt)],
);

/** The thread the row belongs to: deleted with it. */
export const threadColumn = () => parentColumn("thread_id", () => threads.id);

/**
 * One AI SDK UIMessage per row; `parts` is the UIMessage parts array. Ids are unique per thread
 * only: clients choose them, so an id in one thread must never block a message of another.
 */
export const messages = pgTable(
  "messages",
  {
    id: text("id").notNull(),
    threadId: threadColumn(),
    role: text("role", { enum: ["system", "user", "assistant"] }).notNull(),
    parts: jsonb("parts").notNull().$type<unknown[]>(),
    metadata: jsonb("metadata").$type<Record<string, unknown>>(),
    createdAt: createdAtColumn(),
  },
  (t) => [
    primaryKey({ columns: [t.threadId, t.id] }),
    index("messages_thread_created_idx").on(t.threadId, t.createdAt),
    // User messages waiting for a busy thread (server/chat/messages.ts): the queue's head and the web sweep.
    index("messages_queued_idx").on(t.threadId, t.createdAt).where(sql`(${t.metadata} ->> 'queued') = 'true'`),
  ],
);
