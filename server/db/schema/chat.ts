import { sql } from "drizzle-orm";
import { index, jsonb, pgTable, primaryKey, text, timestamp, uuid } from "drizzle-orm/pg-core";
import { users } from "./auth";

export const threads = pgTable(
  "threads",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    userId: uuid("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    title: text("title").notNull().default("New thread"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index("threads_user_updated_idx").on(t.userId, t.updatedAt)],
);

/**
 * One AI SDK UIMessage per row; `parts` is the UIMessage parts array. Ids are unique per thread
 * only: clients choose them, so an id in one thread must never block a message of another.
 */
export const messages = pgTable(
  "messages",
  {
    id: text("id").notNull(),
    threadId: uuid("thread_id")
      .notNull()
      .references(() => threads.id, { onDelete: "cascade" }),
    role: text("role", { enum: ["system", "user", "assistant"] }).notNull(),
    parts: jsonb("parts").notNull().$type<unknown[]>(),
    metadata: jsonb("metadata").$type<Record<string, unknown>>(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.threadId, t.id] }),
    index("messages_thread_created_idx").on(t.threadId, t.createdAt),
    // User messages waiting for a busy thread (server/chat/messages.ts): the queue's head and the web sweep.
    index("messages_queued_idx").on(t.threadId, t.createdAt).where(sql`(${t.metadata} ->> 'queued') = 'true'`),
  ],
);
