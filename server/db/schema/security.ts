import { bigint, index, integer, pgTable, text, uuid, varchar } from "drizzle-orm/pg-core";
import { ownedRowColumns, users } from "./auth";
import { at, createdAtColumn, idColumn } from "./columns";

/** Invite codes (auth.registration = invite): single use, expiring, only a SHA-256 of the code is stored. */
export const invites = pgTable(
  "invites",
  {
    id: idColumn(),
    codeHash: text("code_hash").notNull().unique(),
    /** Null when created from the CLI. */
    createdBy: uuid("created_by").references(() => users.id, { onDelete: "set null" }),
    createdAt: createdAtColumn(),
    expiresAt: at("expires_at").notNull(),
    usedAt: at("used_at"),
    usedBy: uuid("used_by").references(() => users.id, { onDelete: "set null" }),
  },
  (t) => [index("invites_created_idx").on(t.createdAt)],
);

/**
 * One row per signed-in browser session (the JWT carries its id): listed on the Settings page,
 * removed by signing out; a session whose row is gone is refused on its next request.
 */
export const authSessions = pgTable(
  "auth_sessions",
  {
    ...ownedRowColumns(),
    userAgent: text("user_agent"),
    createdAt: createdAtColumn(),
    expiresAt: at("expires_at").notNull(),
  },
  (t) => [index("auth_sessions_user_idx").on(t.userId, t.createdAt)],
);

/**
 * rate-limiter-flexible's Postgres store (server/auth/limits.ts): the table layout the library
 * expects (`key`, `points`, `expire` in epoch milliseconds), created here so no web process runs DDL.
 */
export const authRateLimits = pgTable("auth_rate_limits", {
  key: varchar("key", { length: 255 }).primaryKey(),
  points: integer("points").notNull().default(0),
  expire: bigint("expire", { mode: "number" }),
});
