import { bigint, bigserial, integer, type PgColumn, text, timestamp, uuid } from "drizzle-orm/pg-core";

/**
 * The columns many tables share, written once: keys, timestamps with time zone, references that
 * delete with their parent, and the lease of rows one process claims at a time. The owner and
 * thread references live beside their tables (`ownerColumn` in auth.ts, `threadColumn` in
 * chat.ts), so this file imports no table and every table file may import it.
 */

/** A random uuid primary key. */
export const idColumn = () => uuid("id").primaryKey().defaultRandom();

/** An ordered bigserial primary key (rows read in insertion order). */
export const serialIdColumn = () => bigserial("id", { mode: "number" }).primaryKey();

/** A `timestamp with time zone` column. */
export const at = (name: string) => timestamp(name, { withTimezone: true });

export const createdAtColumn = () => at("created_at").notNull().defaultNow();

/** A required uuid reference whose row is deleted with the row it names. */
export const parentColumn = (name: string, parent: () => PgColumn) =>
  uuid(name).notNull().references(parent, { onDelete: "cascade" });

/** A count that starts at zero. */
export const countColumn = (name: string) => integer(name).notNull().default(0);

/**
 * Rows a web process claims with a lease and retries with backoff (wake-ups, webhook deliveries):
 * the tries made, when the next one is due, and who holds the lease until when.
 */
export const retryLeaseColumns = () => ({
  attempts: countColumn("attempts"),
  nextAttemptAt: at("next_attempt_at").notNull().defaultNow(),
  claimedBy: text("claimed_by"),
});

/**
 * A lead wake-up (of a settled batch, of settled background children): its lease and retries,
 * when it was done, the assistant message it stored (the lead's reply, or the could-not-summarize
 * note; its id is known once the response starts) and the last failure.
 */
export const wakeupColumns = () => ({
  ...retryLeaseColumns(),
  claimedAt: at("claimed_at"),
  leaseExpiresAt: at("lease_expires_at"),
  doneAt: at("done_at"),
  messageId: text("message_id"),
  lastError: text("last_error"),
  createdAt: createdAtColumn(),
});

/**
 * Tokens a model spent (input and output), summed from zero; of the input, those read from and
 * written to the provider's prompt cache (counted inside input_tokens, each priced at its own price).
 */
export const tokenColumns = () => ({
  inputTokens: bigint("input_tokens", { mode: "number" }).notNull().default(0),
  outputTokens: bigint("output_tokens", { mode: "number" }).notNull().default(0),
  cachedInputTokens: bigint("cached_input_tokens", { mode: "number" }).notNull().default(0),
  cacheWriteTokens: bigint("cache_write_tokens", { mode: "number" }).notNull().default(0),
});

/** When a unit of work (a batch, an item) was created, last changed, started and finished. */
export const lifecycleColumns = () => ({
  createdAt: createdAtColumn(),
  updatedAt: at("updated_at").notNull().defaultNow(),
  startedAt: at("started_at"),
  finishedAt: at("finished_at"),
});
