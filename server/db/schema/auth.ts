import { sql } from "drizzle-orm";
import { boolean, check, index, integer, pgTable, primaryKey, text } from "drizzle-orm/pg-core";
import { at, createdAtColumn, idColumn, parentColumn } from "./columns";

export const users = pgTable("users", {
  id: idColumn(),
  email: text("email").notNull().unique(),
  /** scrypt$N$r$p$salt$hash, see server/auth/password.ts */
  passwordHash: text("password_hash").notNull(),
  /** The first account ever created; may invite people and sees the Workers page and metrics. */
  isAdmin: boolean("is_admin").notNull().default(false),
  /** Raised by "sign out everywhere": a session signed in under an older version is refused. */
  sessionVersion: integer("session_version").notNull().default(0),
  createdAt: createdAtColumn(),
});

/** The owning user: the row is deleted with its user. */
export const ownerColumn = () => parentColumn("user_id", () => users.id);

/** A row a user owns: its uuid key and its owner. */
export const ownedRowColumns = () => ({ id: idColumn(), userId: ownerColumn() });

/** Personal API tokens; only a SHA-256 of the token is stored. */
export const apiTokens = pgTable(
  "api_tokens",
  {
    ...ownedRowColumns(),
    tokenHash: text("token_hash").notNull().unique(),
    name: text("name").notNull().default("cli"),
    createdAt: createdAtColumn(),
    lastUsedAt: at("last_used_at"),
    /** Null = never expires. An expired token answers 401. */
    expiresAt: at("expires_at"),
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
    createdAt: createdAtColumn(),
  },
  (t) => [check("setup_codes_one_row", sql`${t.only}`)],
);

/** Addresses a user signed in from successfully (smart lockout: server/auth/limits.ts). */
export const familiarAddresses = pgTable(
  "familiar_addresses",
  {
    userId: ownerColumn(),
    address: text("address").notNull(),
    lastSignedInAt: at("last_signed_in_at").notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.userId, t.address] })],
);
