import { sql } from "drizzle-orm";
import { index, integer, pgTable, text } from "drizzle-orm/pg-core";
import { ownedRowColumns } from "./auth";
import { subagentBatches } from "./batches";
import { at, countColumn, createdAtColumn, parentColumn } from "./columns";

/**
 * Where a provider batch is: `submitting` (items taken, the provider's batch not yet known to
 * exist), `in_progress` at the provider, `canceling` (asked to cancel), `ended` (results there to
 * be fetched and settled), `settled` (every item of it written), `abandoned` (the submitting
 * worker died before the provider answered: its items went back to the queue).
 */
export const PROVIDER_BATCH_STATES = ["submitting", "in_progress", "canceling", "ended", "settled", "abandoned"] as const;
export type ProviderBatchState = (typeof PROVIDER_BATCH_STATES)[number];

/**
 * One provider batch of a `lane: "provider_batch"` batch (server/batches/provider-lane/): the
 * provider's id and state, its request counts, and the lease of the one worker that polls it
 * (provider-lane.sql). Its items link back by subagent_batch_items.provider_batch_id.
 */
export const providerBatches = pgTable(
  "provider_batches",
  {
    ...ownedRowColumns(),
    batchId: parentColumn("batch_id", () => subagentBatches.id),
    /** openai | anthropic */
    provider: text("provider").notNull(),
    /** The provider's batch id (null while submitting). */
    externalId: text("external_id"),
    /** OpenAI: the uploaded input file. */
    inputFileId: text("input_file_id"),
    state: text("state", { enum: PROVIDER_BATCH_STATES }).notNull().default("submitting"),
    /** The provider's own status word, as it last answered. */
    providerStatus: text("provider_status"),
    requests: countColumn("requests"),
    succeeded: countColumn("succeeded"),
    errored: countColumn("errored"),
    expired: countColumn("expired"),
    cancelled: countColumn("cancelled"),
    leaseOwner: text("lease_owner"),
    leaseExpiresAt: at("lease_expires_at"),
    /** Polls made (a fake's "finish after N polls" and the panel read it). */
    polls: integer("polls").notNull().default(0),
    nextPollAt: at("next_poll_at").notNull().defaultNow(),
    lastError: text("last_error"),
    createdAt: createdAtColumn(),
    endedAt: at("ended_at"),
  },
  (t) => [
    index("provider_batches_batch_idx").on(t.batchId, t.createdAt),
    index("provider_batches_due_idx")
      .on(t.nextPollAt)
      .where(sql`state in ('submitting', 'in_progress', 'canceling', 'ended')`),
  ],
);
