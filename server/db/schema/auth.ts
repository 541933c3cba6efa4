import { sql } from "drizzle-orm";
import { boolean, check, index, integer, pgTable, primaryKey, text, timestamp, uuid } from "drizzle-orm/pg-core";

export const users = pgTable("users", {
  id: uuid("id").primaryKey().defaultRandom(),
  email: text("email").notNull().unique(),
  /** scrypt$N$r$p$salt$hash, see server/auth/password.ts */
  passwordHash: text("password_hash").notNull(),
  /** The first account ever created; may invite people and sees the Workers page and metrics. */
  isAdmin: boolean("is_admin").notNull().default(false),
  /** Raised by "sign out everywhere": a session signed in under an older version is refused. */
  sessionVersion: integer("session_version").notNull().default(0),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
});

/** Personal API tokens; only a SHA-256 of the token is stored. */
export const apiTokens = pgTable(
  "api_tokens",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    userId: uuid("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    tokenHash: text("token_hash").notNull().unique(),
    name: text("name").notNull().default("cli"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    lastUsedAt: timestamp("last_used_at", { withTimezone: true }),
    /** Null = never expires. An expired token answers 401. */
    expiresAt: timestamp("expires_at", { withTimezone: true }),
  },
  (t) => [index("api_tokens_user_idx").on(t.userId)],
);

/**
 * The code that lets the first account be created over HTTP (server/auth/setup-code.ts): one row,
 * made on first need, deleted when the first account is created. Kept readable (not hashed) so
 * the web process and the CLI can both show it; it is worthless once any account exists.
 */
export const setupCodes = pgTable(
  "setup_codes",
  {
    only: boolean("only").primaryKey().default(true),
    code: text("code").notNull(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check("setup_codes_one_row", sql`${t.only}`)],
);

/** Addresses a user signed in from successfully (smart lockout: server/auth/limits.ts). */
export const familiarAddresses = pgTable(
  "familiar_addresses",
  {
    userId: uuid("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    address: text("address").notNull(),
    lastSignedInAt: timestamp("last_signed_in_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.address] })],
);
