import { REVIEW_STATES } from "@/lib/api/reviews";
import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  uniqueIndex,
  uuid,
} from "drizzle-orm/pg-core";
import { ownedRowColumns, } from "./auth";
import { threadColumn } from "./chat";
import {
  at,
  countColumn,
  createdAtColumn,
  idColumn,
  lifecycleColumns,
  parentColumn,
  serialIdColumn,
  tokenColumns,
} from "./columns";

export const BATCH_STATUSES = ["queued", "running", "paused", "completed", "failed", "cancelled"] as const;
export type BatchStatus = (typeof BATCH_STATUSES)[number];
export const ITEM_STATUSES = [
  "pending",
  "queued",
  "leased",
  "running",
  "awaiting_approval",
  "succeeded",
  "failed",
  "cancelled",
] as const;
export type ItemStatus = (typeof ITEM_STATUSES)[number];

export const PAUSE_REASONS = ["user", "budget", "quota", "pilot"] as const;
export type PauseReason = (typeof PAUSE_REASONS)[number];

/** How a batch's items reach the model: one live call each, or the provider's batch API (provider_batches). */
export const BATCH_LANES = ["live", "provider_batch"] as const;
export type BatchLane = (typeof BATCH_LANES)[number];

export const subagentBatches = pgTable(
  "subagent_batches",
  {
    ...ownedRowColumns(),
    threadId: threadColumn(),
    submissionKey: text("submission_key").notNull(),
    status: text("status", { enum: BATCH_STATUSES }).notNull().default("queued"),
    subagent: text("subagent").notNull(),
    /** The live claim takes only `live` batches; the provider lane (server/batches/provider-lane/) the others. */
    lane: text("lane", { enum: BATCH_LANES }).notNull().default("live"),
    /** Snapshot of definition, model, tool groups and caller authorization. Never projected. */
    executionSpec: jsonb("execution_spec").$type<Record<string, unknown>>().notNull(),
    total: integer("total").notNull(),
    maxLiveItems: integer("max_live_items").notNull(),
    maxRunningItems: integer("max_running_items").notNull(),
    maxAttempts: integer("max_attempts").notNull(),
    // Per-status counters, moved in the same transactions that move items (progress reads never scan items).
    pendingCount: countColumn("pending_count"),
    queuedCount: countColumn("queued_count"),
    leasedCount: countColumn("leased_count"),
    runningCount: countColumn("running_count"),
    /** Items parked until a person decides on a tool call (they hold no slot and no lease). */
    awaitingApprovalCount: countColumn("awaiting_approval_count"),
    succeededCount: countColumn("succeeded_count"),
    failedCount: countColumn("failed_count"),
    cancelledCount: countColumn("cancelled_count"),
    // Verdicts of finished items with checks, moved by the same counters trigger.
    verdictPassedCount: countColumn("verdict_passed_count"),
    verdictFailedCount: countColumn("verdict_failed_count"),
    ...tokenColumns(),
    // Budgets (server/batches/budget.ts). The BEFORE UPDATE trigger of the loop migration pauses
    // the batch (pause_reason "budget" / "quota") in the transaction whose settle reaches them.
    maxTotalTokens: bigint("max_total_tokens", { mode: "number" }),
    maxCostUsd: doublePrecision("max_cost_usd"),
    /**
     * US dollars spent: the sum of the items' cost_usd, moved by the counters trigger (counters.sql);
     * budgets compare it (the loop trigger).
     */
    costUsd: doublePrecision("cost_usd").notNull().default(0),
    /**
     * Catalog prices of the spec's model, snapshotted at submission: the price of an attempt whose
     * executor did not price it itself (settle.sql).
     */
    priceInputPerMillion: doublePrecision("price_input_per_million").notNull().default(0),
    priceOutputPerMillion: doublePrecision("price_output_per_million").notNull().default(0),
    /** quotas.max_tokens_per_day at submission (0 = off). */
    dailyTokenQuota: bigint("daily_token_quota", { mode: "number" }).notNull().default(0),
    pauseReason: text("pause_reason", { enum: PAUSE_REASONS }),
    /**
     * `pilot: N`: only items at positions 1..N may be claimed (claim.sql); once N have finished the
     * loop trigger pauses the batch (pause_reason "pilot"). Resuming from that pause clears it.
     */
    pilot: integer("pilot"),
    /** Lead-submitted with subagent_batches.wake_lead on: each settlement queues a wake-up. */
    wakeLead: boolean("wake_lead").notNull().default(false),
    /** Bumped by the trigger each time the batch settles (a retry re-opens and re-settles it). */
    settlementSeq: countColumn("settlement_seq"),
    /** Settled since the owner last opened the thread (sidebar badge). */
    unseenSettlement: boolean("unseen_settlement").notNull().default(false),
    /** Round-robin fairness across active batches. */
    lastClaimedAt: at("last_claimed_at"),
    ...lifecycleColumns(),
    /** When a retry last reopened the finished batch (retry.sql): its elapsed time and throughput count from here. */
    reopenedAt: at("reopened_at"),
    /** The batch this one re-runs with changed settings (POST .../variant); no reference: a variant outlives its original. */
    variantOf: uuid("variant_of"),
    /** Which finished items join the review queue (the submission's `review`): failed | all | sample; null = none. */
    reviewWhen: text("review_when", { enum: ["failed", "all", "sample"] }),
    /** `sample`: the share of items, chosen by a hash of item_key. */
    reviewRate: doublePrecision("review_rate"),
  },
  (t) => [
    uniqueIndex("subagent_batches_submission_uq").on(t.userId, t.submissionKey),
    index("subagent_batches_thread_idx").on(t.threadId, t.createdAt),
    index("subagent_batches_unseen_idx").on(t.threadId).where(sql`unseen_settlement`),
    index("subagent_batches_active_idx")
      .on(t.lastClaimedAt)
      .where(sql`status in ('queued', 'running')`),
  ],
);

export const subagentBatchItems = pgTable(
  "subagent_batch_items",
  {
    id: idColumn(),
    // No foreign key: its per-row check was a third of writing 100,000 items (drizzle/0010_scale_items.sql).
    // Items are written only with their batch (insert-items.ts, same transaction) and leave with
    // it: the subagent_batches_delete_items trigger deletes them.
    batchId: uuid("batch_id").notNull(),
    position: integer("position").notNull(),
    itemKey: text("item_key").notNull(),
    prompt: text("prompt").notNull(),
    /** What the owner submitted for this item: the string that filled {{item}}, or the explicit prompt. */
    input: text("input").notNull().default(""),
    status: text("status", { enum: ITEM_STATUSES }).notNull(),
    /** Attempts started (claims that reached a lease). */
    attempts: countColumn("attempts"),
    /** Fencing token: bumped on every claim; every later write must match owner + token. */
    leaseToken: bigint("lease_token", { mode: "number" }).notNull().default(0),
    /**
     * Which run of the item from its start (DESIGN "Durable steps"): 1, advanced whenever a re-run
     * drops its stored steps (a retry, an attempt that starts over). Part of the tool calls'
     * idempotency key, so a re-run's writes are not taken for replays of the last one's.
     */
    generation: integer("generation").notNull().default(1),
    leaseOwner: text("lease_owner"),
    /** When the current lease was taken (copied into the attempt row when the attempt ends). */
    leasedAt: at("leased_at"),
    leaseExpiresAt: at("lease_expires_at"),
    /** Not claimable before this instant (rate-limit deferral). */
    availableAt: at("available_at"),
    deferrals: countColumn("deferrals"),
    result: text("result"),
    preview: text("preview"),
    /** Typed results: the answer parsed (and valid against the spec's output_schema). */
    output: jsonb("output"),
    /** Object items: what the checks compare against; never part of the prompt. */
    expected: jsonb("expected"),
    /** How each check judged the final answer: [{ name, passed, score?, reason? }]. */
    checks: jsonb("checks").$type<{ name: string; passed: boolean; score?: number; reason?: string }[]>(),
    /** passed | failed once finished with checks; null otherwise. */
    verdict: text("verdict", { enum: ["passed", "failed"] }),
    error: text("error"),
    model: text("model"),
    stopReason: text("stop_reason"),
    ...tokenColumns(),
    /** US dollars: each attempt's tokens, each model's (the item's, a judge's) at its own price snapshot (settle.sql). */
    costUsd: doublePrecision("cost_usd").notNull().default(0),
    runId: uuid("run_id"),
    /**
     * The provider batch the item was last sent in (provider_batches). While it is `running` there
     * with no lease it holds no slot, and lease recovery leaves it to the provider lane.
     */
    providerBatchId: uuid("provider_batch_id"),
    ...lifecycleColumns(),
    // A person's review (DESIGN "Judging a batch"): null until the item is queued for one.
    reviewState: text("review_state", { enum: REVIEW_STATES }),
    reviewNote: text("review_note"),
    /** A corrected answer, valid against the batch's output_schema, kept beside the model's. */
    reviewedOutput: jsonb("reviewed_output"),
    reviewedAt: at("reviewed_at"),
    /** Optimistic concurrency of review decisions: a decision names the version it saw. */
    reviewVersion: integer("review_version").notNull().default(0),
    /** When the item joined the review queue (the queue is oldest first). */
    reviewRequestedAt: at("review_requested_at"),
  },
  (t) => [
    index("subagent_batch_items_provider_batch_idx")
      .on(t.providerBatchId)
      .where(sql`provider_batch_id is not null and status = 'running'`),
    // Paging, export and claim order.
    uniqueIndex("subagent_batch_items_position_uq").on(t.batchId, t.position),
    // A comparison's page looks up the other batch's items by key (server/batches/compare.ts), so
    // a page costs the same whatever that batch's size. Not unique: the submission checks keys
    // (drizzle/0032_compare_key_index.sql has what it costs a write).
    index("subagent_batch_items_key_idx").on(t.batchId, t.itemKey),
    // No (batch_id, status, position) index: status changes on every transition, and maintaining
    // it cost ~40% of each transition's time. A status-filtered page uses the partial index of
    // its status where there is one (pending and queued for promote and claim; failed and
    // cancelled, rare and terminal, for pages) and otherwise walks the position index.
    ...(["queued", "pending", "failed", "cancelled"] as const).map((status) =>
      index(`subagent_batch_items_${status}_idx`)
        .on(t.batchId, t.position)
        .where(sql.raw(`status = '${status}'`)),
    ),
    // Pages filtered by a failed verdict (the Results view's "failed", batch retry by verdict).
    index("subagent_batch_items_verdict_failed_idx")
      .on(t.batchId, t.position)
      .where(sql`verdict = 'failed'`),
    // The review queue across a person's batches, oldest first, and a batch's reviewed items.
    index("subagent_batch_items_review_pending_idx")
      .on(t.reviewRequestedAt, t.id)
      .where(sql`review_state = 'pending'`),
    index("subagent_batch_items_reviewed_idx")
      .on(t.batchId, t.position)
      .where(sql`review_state is not null`),
    index("subagent_batch_items_lease_idx")
      .on(t.leaseExpiresAt)
      .where(sql`status in ('leased', 'running')`),
  ],
);

/**
 * Durable steps of a batch item (issue 26): one row per completed model step that another step
 * follows (its response messages: the assistant's tool calls and their results), written under
 * the item's lease (steps.sql). A new attempt after a lost lease or a shutdown resumes from them;
 * a settlement that ends or re-runs the execution drops them (settle.sql, retry.sql).
 */
export const subagentBatchItemSteps = pgTable(
  "subagent_batch_item_steps",
  {
    itemId: parentColumn("item_id", () => subagentBatchItems.id),
    /** The 1-based model step (0: an answer kept for its rate-limited judges, steps.ts). */
    step: integer("step").notNull(),
    /** The step's response messages (ModelMessage[]: the assistant message, then the tool results). */
    messages: jsonb("messages").notNull(),
    /** The step's finished tool calls (ToolCallRecord[]), for the item's transcript across attempts. */
    toolCalls: jsonb("tool_calls").notNull(),
    /** The lease token of the attempt that wrote it. */
    leaseToken: bigint("lease_token", { mode: "number" }).notNull(),
    createdAt: createdAtColumn(),
  },
  (t) => [primaryKey({ columns: [t.itemId, t.step] })],
);

/**
 * One row per ended attempt (claim) of an item: who held it, how it ended. Written once, when
 * the attempt ends (settled, lease expired, cancelled), so the hot claim path stays one write.
 */
export const subagentBatchItemAttempts = pgTable(
  "subagent_batch_item_attempts",
  {
    id: serialIdColumn(),
    itemId: parentColumn("item_id", () => subagentBatchItems.id),
    batchId: uuid("batch_id").notNull(),
    attempt: integer("attempt").notNull(),
    workerId: text("worker_id").notNull(),
    /** succeeded | failed | retry | released | deferred | lease_expired | cancelled */
    outcome: text("outcome"),
    error: text("error"),
    runId: uuid("run_id"),
    leasedAt: at("leased_at").notNull().defaultNow(),
    /** Null when execution never started (released, deferred before start, lease lost while leased). */
    startedAt: at("started_at"),
    finishedAt: at("finished_at"),
  },
  (t) => [
    index("subagent_batch_item_attempts_item_idx").on(t.itemId, t.attempt),
    // Recent throughput (ETA) reads only the last minutes of one batch's finished attempts.
    index("subagent_batch_item_attempts_recent_idx")
      .on(t.batchId, t.finishedAt)
      .where(sql`outcome in ('succeeded', 'failed')`),
    // The wake-up summary's "first failures by error" reads only failed attempts.
    index("subagent_batch_item_attempts_failed_idx")
      .on(t.batchId, t.id)
      .where(sql`outcome in ('failed', 'lease_expired')`),
  ],
);

/** Per batch and check: finished items that passed and failed it (moved by the counters trigger). */
export const subagentBatchCheckCounts = pgTable(
  "subagent_batch_check_counts",
  {
    batchId: parentColumn("batch_id", () => subagentBatches.id),
    name: text("name").notNull(),
    passed: countColumn("passed"),
    failed: countColumn("failed"),
  },
  (t) => [primaryKey({ columns: [t.batchId, t.name] })],
);
