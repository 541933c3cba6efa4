import { sql } from "drizzle-orm";
import { bigint, date, index, integer, jsonb, pgTable, primaryKey, text, uniqueIndex, uuid } from "drizzle-orm/pg-core";
import { ownerColumn, users } from "./auth";
import { subagentBatches } from "./batches";
import { threadColumn } from "./chat";
import { at, createdAtColumn, parentColumn, retryLeaseColumns, serialIdColumn, wakeupColumns } from "./columns";

/**
 * Closing the loop on durable batches: lead wake-ups, per-user webhooks and their deliveries,
 * and the per-user daily token counter. Wake-up and delivery rows are inserted by the trigger
 * in the transaction that settles the batch, so nothing is lost when no web process is up.
 */

/** One row per (batch, settlement): claimed by one web process with a lease, done once. */
export const batchWakeups = pgTable(
  "batch_wakeups",
  {
    id: serialIdColumn(),
    batchId: parentColumn("batch_id", () => subagentBatches.id),
    threadId: threadColumn(),
    userId: ownerColumn(),
    settlementSeq: integer("settlement_seq").notNull(),
    /** Batch status at settlement (completed | failed | cancelled). */
    settledStatus: text("settled_status").notNull(),
    ...wakeupColumns(),
  },
  (t) => [
    uniqueIndex("batch_wakeups_settlement_uq").on(t.batchId, t.settlementSeq),
    index("batch_wakeups_pending_idx").on(t.nextAttemptAt).where(sql`done_at is null`),
    index("batch_wakeups_thread_idx").on(t.threadId).where(sql`done_at is null`),
    // The fair claim: one user's due rows, and what that user already has in flight.
    index("batch_wakeups_user_pending_idx").on(t.userId, t.nextAttemptAt).where(sql`done_at is null`),
    // A user's replies of the last minute (the open chats' watch: server/chat/wakeup-watch.ts).
    index("batch_wakeups_user_done_idx").on(t.userId, t.doneAt),
  ],
);

/**
 * At most one webhook per user. The secret (`whsec_<base64>`) signs deliveries the Standard
 * Webhooks way; shown once at creation. `legacy` marks a secret issued before that scheme: its
 * deliveries also carry the old body-only `X-Flotilla-Signature` until the user takes a new one.
 */
export const userWebhooks = pgTable("user_webhooks", {
  userId: uuid("user_id")
    .primaryKey()
    .references(() => users.id, { onDelete: "cascade" }),
  url: text("url").notNull(),
  secret: text("secret").notNull(),
  signing: text("signing", { enum: ["standard", "legacy"] }).notNull().default("standard"),
  createdAt: createdAtColumn(),
  updatedAt: at("updated_at").notNull().defaultNow(),
});

/**
 * One POST per event (a batch settlement or pause) and user, retried with backoff; the body is
 * fixed at insert, `event_id` is the `webhook-id` every attempt repeats.
 */
export const webhookDeliveries = pgTable(
  "webhook_deliveries",
  {
    id: serialIdColumn(),
    userId: ownerColumn(),
    batchId: parentColumn("batch_id", () => subagentBatches.id),
    settlementSeq: integer("settlement_seq").notNull(),
    /** batch.completed | batch.failed | batch.cancelled | batch.paused */
    type: text("type").notNull(),
    eventId: uuid("event_id").notNull().defaultRandom(),
    url: text("url").notNull(),
    body: jsonb("body").$type<Record<string, unknown>>().notNull(),
    /** pending | delivered | failed | refused (the URL reached a refused address: no request made) */
    status: text("status", { enum: ["pending", "delivered", "failed", "refused"] }).notNull().default("pending"),
    ...retryLeaseColumns(),
    leaseExpiresAt: at("lease_expires_at"),
    lastStatusCode: integer("last_status_code"),
    lastError: text("last_error"),
    deliveredAt: at("delivered_at"),
    createdAt: createdAtColumn(),
  },
  (t) => [
    // A batch pauses any number of times within one settlement; it settles once per number.
    uniqueIndex("webhook_deliveries_settlement_uq")
      .on(t.batchId, t.settlementSeq, t.userId)
      .where(sql`type <> 'batch.paused'`),
    index("webhook_deliveries_pending_idx").on(t.nextAttemptAt).where(sql`status = 'pending'`),
    index("webhook_deliveries_user_pending_idx").on(t.userId, t.nextAttemptAt).where(sql`status = 'pending'`),
  ],
);

/** Tokens a user spent per UTC day (batch items through the batch trigger, lead and task runs through the run trigger). */
export const userDailyTokens = pgTable(
  "user_daily_tokens",
  {
    userId: ownerColumn(),
    day: date("day").notNull(),
    tokens: bigint("tokens", { mode: "number" }).notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.userId, t.day] })],
);
