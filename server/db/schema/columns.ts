import { timestamp, uuid } from "drizzle-orm/pg-core";
import { users } from "./auth";
import { threads } from "./chat";

/**
 * The columns most tables share, written once: a random uuid key, timestamps with time zone,
 * and the owner / thread references that delete with their user or thread. (auth.ts and chat.ts
 * define users and threads themselves, so they do not import this file.)
 */

export const idColumn = () => uuid("id").primaryKey().defaultRandom();

/** A `timestamp with time zone` column. */
export const at = (name: string) => timestamp(name, { withTimezone: true });

export const createdAtColumn = () => at("created_at").notNull().defaultNow();

export const ownerColumn = () =>
  uuid("user_id")
    .notNull()
    .references(() => users.id, { onDelete: "cascade" });

export const threadColumn = () =>
  uuid("thread_id")
    .notNull()
    .references(() => threads.id, { onDelete: "cascade" });
