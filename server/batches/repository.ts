import { and, asc, desc, eq, gt, sql } from "drizzle-orm";
import { type BatchSubmission, isFileSubmission } from "@/lib/api/files";
import type { FlotillaConfig } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { subagentBatches, subagentBatchItems, threads } from "@/server/db/schema";
import { ITEM_STATUSES, type ItemStatus } from "@/server/db/schema/batches";
import { AppError, notFound } from "@/server/errors";
import { resolveModel } from "@/server/models/index";
import { expandFileSubmission } from "@/server/workspace/batches";
import { assertResumable, modelPrices } from "./budget";
import { decodeCursor, encodeCursor } from "./cursor";
import { insertItems } from "./insert-items";
import { BATCH_CHANNEL, type BatchEvent, batchEventPayload } from "./notify";
import { buildExecutionSpec, type SubmissionOrigin } from "./spec";
import type { BatchRow, ItemPageResult, ItemSummary, ResultLine } from "./types";
import { normalizeSubmission } from "./validate";

/**
 * Owner-facing batch repository. Every function takes the database first and one object
 * argument, and every read or mutation is scoped by (userId, threadId): a batch of someone
 * else, or of another thread, is "not found". Worker-side transitions live in claim.ts.
 */

export type { BatchRow, ItemPageResult, ItemSummary, ResultLine } from "./types";

export const ITEM_PAGE_MAX = 200;
export const ITEM_PAGE_DEFAULT = 50;
export const BATCH_LIST_MAX = 100;
/** Item pages carry previews and errors cut to this many characters. */
export const ITEM_PREVIEW_MAX_CHARS = 2_000;
/** Item rows carry their input cut to this; the JSONL export carries it whole. */
export const ITEM_INPUT_MAX_CHARS = 200;
/** Export pages: bounded memory however large the batch (results are at most max_result_chars each). */
export const EXPORT_PAGE_ROWS = 100;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const ACTIVE = ["queued", "running", "paused"] as const;

export interface BatchScopeArgs {
  userId: string;
  threadId: string;
  batchId: string;
}

function checkIds(args: { threadId: string; batchId?: string; itemId?: string }): void {
  if (!UUID.test(args.threadId)) throw notFound("thread");
  if (args.batchId !== undefined && !UUID.test(args.batchId)) throw notFound("batch");
  if (args.itemId !== undefined && !UUID.test(args.itemId)) throw notFound("item");
}

async function notify(db: DbOrTx, event: BatchEvent, batchId: string): Promise<void> {
  // Delivered at commit; a rolled-back transaction sends nothing.
  await db.execute(sql`select pg_notify(${BATCH_CHANNEL}, ${batchEventPayload(event, batchId)})`);
}

// ---------------------------------------------------------------------------------------------
// Submission

export interface SubmitBatchArgs {
  userId: string;
  threadId: string;
  /** Items, or a glob over the thread's workspace files (adds the `workspace` group). */
  input: BatchSubmission;
  config: FlotillaConfig;
  /** Model recorded in the execution spec; default: this process's resolved model. */
  model?: { name: string; simulator: boolean; catalogName?: string };
  /** Where the submission came from; the tool passes its run and tool call. Default api. */
  origin?: SubmissionOrigin;
}

/**
 * Creates a batch and all its items in one transaction, or returns the existing batch when
 * (userId, submission_key) was seen before (`created: false`). The whole input is validated
 * first; nothing is written on any error. Items are streamed in with COPY (insert-items.ts);
 * the first max_live_items enter as queued.
 */
export async function submitBatch(db: Db, args: SubmitBatchArgs): Promise<{ batch: BatchRow; created: boolean }> {
  checkIds({ threadId: args.threadId });
  const overFiles = isFileSubmission(args.input);
  if (overFiles) {
    // A replay answers with the batch it made, whatever the workspace holds by now.
    const earlier = await replayOf(db, args, args.input.submission_key);
    if (earlier) return { batch: earlier, created: false };
  }
  const input = isFileSubmission(args.input) ? await expandFileSubmission(db, { ...args, input: args.input }) : args.input;
  const normalized = normalizeSubmission(input, args.config);
  // A batch over files shows each item's file path as its input (its key is that path too).
  const sub = overFiles ? { ...normalized, items: normalized.items.map((i) => ({ ...i, input: i.key })) } : normalized;
  const spec = buildExecutionSpec({
    extraToolGroups: overFiles ? ["workspace"] : [],
    config: args.config,
    userId: args.userId,
    threadId: args.threadId,
    subagent: sub.subagent,
    model: args.model ?? resolveModel(args.config),
    origin: args.origin ?? { kind: "api" },
  });
  const total = sub.items.length;
  const live = Math.min(total, sub.maxLiveItems);
  const prices = modelPrices(args.config, spec.model.name);
  // Only the lead's own submissions wake it when they settle (API and dialog batches never do).
  const wakeLead = spec.caller.origin === "tool" && args.config.subagent_batches.wake_lead;

  // Per-user quotas, race-safe: one submission per user at a time takes the count and inserts
  // under a transaction-scoped advisory lock. A replay of an existing key is never refused.
  const rows = await db.transaction(async (tx) => {
    await tx.execute(sql`select pg_advisory_xact_lock(hashtext('flotilla:submit'), hashtext(${args.userId}))`);
    const [replay] = await tx
      .select({ id: subagentBatches.id })
      .from(subagentBatches)
      .where(and(eq(subagentBatches.userId, args.userId), eq(subagentBatches.submissionKey, sub.submissionKey)));
    if (!replay) await checkQuotas(tx, { userId: args.userId, total, quotas: args.config.quotas });
    const created = await insertSubmission(tx, { ...args, sub, spec, total, live, prices, wakeLead });
    if (created.length === 1) await insertItems(tx, { batchId: created[0]!.id, offset: 0, live, items: sub.items });
    return created;
  });
  if (rows.length === 1) {
    const [batch] = await db.select().from(subagentBatches).where(eq(subagentBatches.id, rows[0]!.id));
    return { batch: batch!, created: true };
  }
  const existing = await replayOf(db, args, sub.submissionKey);
  if (!existing) throw new AppError("conflict", "submission_key: a concurrent submission with this key did not complete; retry");
  return { batch: existing, created: false };
}

/** quotas.max_active_batches and quotas.max_queued_items, from the batch counters (no item scan). */
async function checkQuotas(
  tx: DbOrTx,
  args: { userId: string; total: number; quotas: SubmitBatchArgs["config"]["quotas"] },
): Promise<void> {
  const [usage] = await tx.execute<{ active: number; unfinished: number }>(sql`
    select count(*)::int as active,
           coalesce(sum(pending_count + queued_count + leased_count + running_count), 0)::int as unfinished
      from subagent_batches
     where user_id = ${args.userId} and status in ('queued', 'running', 'paused')`);
  const { active, unfinished } = usage ?? { active: 0, unfinished: 0 };
  if (active >= args.quotas.max_active_batches)
    throw new AppError(
      "quota_exceeded",
      `quotas.max_active_batches: you have ${active} active batches, the most allowed; wait for one to finish or cancel one`,
    );
  if (unfinished + args.total > args.quotas.max_queued_items)
    throw new AppError(
      "quota_exceeded",
      `quotas.max_queued_items: ${unfinished} of your items are unfinished and this batch adds ${args.total}; at most ${args.quotas.max_queued_items} at once`,
    );
}

async function insertSubmission(
  db: DbOrTx,
  args: SubmitBatchArgs & {
    sub: ReturnType<typeof normalizeSubmission>;
    spec: ReturnType<typeof buildExecutionSpec>;
    total: number;
    live: number;
    prices: { input: number; output: number };
    wakeLead: boolean;
  },
): Promise<{ id: string }[]> {
  const { sub, spec, total, live, prices, wakeLead } = args;
  // One statement: ownership, the idempotent batch insert and the wake-up notification (sent at
  // commit, after the items). Only a replay or a refusal needs a second look.
  return db.execute<{ id: string }>(sql`
    with owner as (
      select 1 from threads where id = ${args.threadId} and user_id = ${args.userId}
    ),
    ins as (
      insert into subagent_batches (user_id, thread_id, submission_key, subagent, execution_spec, total,
                                    max_live_items, max_running_items, max_attempts, pending_count, queued_count,
                                    max_total_tokens, max_cost_usd, price_input_per_million, price_output_per_million,
                                    daily_token_quota, wake_lead)
      select ${args.userId}::uuid, ${args.threadId}::uuid, ${sub.submissionKey}, ${spec.subagent.name},
             ${JSON.stringify(spec)}::jsonb, ${total}::int, ${sub.maxLiveItems}::int, ${sub.maxRunningItems}::int,
             ${args.config.subagent_batches.max_attempts}::int, ${total - live}::int, ${live}::int,
             ${sub.maxTotalTokens}::bigint, ${sub.maxCostUsd}::float8, ${prices.input}::float8, ${prices.output}::float8,
             ${args.config.quotas.max_tokens_per_day}::bigint, ${wakeLead}::boolean
        from owner
      on conflict (user_id, submission_key) do nothing
      returning id
    ),
    note as (
      select pg_notify(${BATCH_CHANNEL}, ${batchEventPayload("submit", "")} || ins.id::text) from ins
    )
    select ins.id, (select count(*) from note) as notified from ins
  `);
}

/** The batch an earlier submission with this key made (404 / 409 when it cannot be this caller's replay), or null. */
async function replayOf(db: Db, args: SubmitBatchArgs, submissionKey: string): Promise<BatchRow | null> {
  const owned = await db
    .select({ id: threads.id })
    .from(threads)
    .where(and(eq(threads.id, args.threadId), eq(threads.userId, args.userId)));
  if (owned.length === 0) throw notFound("thread");
  const [existing] = await db
    .select()
    .from(subagentBatches)
    .where(and(eq(subagentBatches.userId, args.userId), eq(subagentBatches.submissionKey, submissionKey)));
  if (!existing) return null;
  if (existing.threadId !== args.threadId)
    throw new AppError("conflict", "submission_key: already used for a batch in another thread");
  return existing;
}

// ---------------------------------------------------------------------------------------------
// Reads

export async function getBatch(db: DbOrTx, args: BatchScopeArgs): Promise<BatchRow> {
  checkIds(args);
  const [row] = await db
    .select()
    .from(subagentBatches)
    .where(
      and(
        eq(subagentBatches.id, args.batchId),
        eq(subagentBatches.userId, args.userId),
        eq(subagentBatches.threadId, args.threadId),
      ),
    );
  if (!row) throw notFound("batch");
  return row;
}

/** The thread's batches, newest first. */
export async function listBatches(
  db: DbOrTx,
  args: { userId: string; threadId: string; limit?: number },
): Promise<BatchRow[]> {
  checkIds(args);
  return db
    .select()
    .from(subagentBatches)
    .where(and(eq(subagentBatches.threadId, args.threadId), eq(subagentBatches.userId, args.userId)))
    .orderBy(desc(subagentBatches.createdAt), desc(subagentBatches.id))
    .limit(Math.min(Math.max(args.limit ?? BATCH_LIST_MAX, 1), BATCH_LIST_MAX));
}

/** Counts of batches of this owner that still have work (for the panel's active-batch badge). */
export async function countActiveBatches(db: DbOrTx, args: { userId: string; threadId: string }): Promise<number> {
  checkIds(args);
  const [row] = await db
    .select({ n: sql<number>`count(*)::int` })
    .from(subagentBatches)
    .where(
      and(
        eq(subagentBatches.threadId, args.threadId),
        eq(subagentBatches.userId, args.userId),
        sql`${subagentBatches.status} in ('queued', 'running', 'paused')`,
      ),
    );
  return row?.n ?? 0;
}

export function parseItemStatus(value: string | null | undefined): ItemStatus | undefined {
  if (value === null || value === undefined || value === "") return undefined;
  if (!(ITEM_STATUSES as readonly string[]).includes(value))
    throw new AppError("validation_failed", `status: must be one of ${ITEM_STATUSES.join(", ")}`);
  return value as ItemStatus;
}

function countOf(batch: BatchRow, status: ItemStatus): number {
  const counts: Record<ItemStatus, number> = {
    pending: batch.pendingCount,
    queued: batch.queuedCount,
    leased: batch.leasedCount,
    running: batch.runningCount,
    succeeded: batch.succeededCount,
    failed: batch.failedCount,
    cancelled: batch.cancelledCount,
  };
  return counts[status];
}

/** The columns of an item page row: bounded previews, never the prompt or the full result. */
export const itemSummaryColumns = {
  id: subagentBatchItems.id,
  batchId: subagentBatchItems.batchId,
  itemKey: subagentBatchItems.itemKey,
  input: sql<string>`left(${subagentBatchItems.input}, ${ITEM_INPUT_MAX_CHARS})`,
  position: subagentBatchItems.position,
  status: subagentBatchItems.status,
  attempts: subagentBatchItems.attempts,
  preview: sql<string | null>`left(${subagentBatchItems.preview}, ${ITEM_PREVIEW_MAX_CHARS})`,
  error: sql<string | null>`left(${subagentBatchItems.error}, ${ITEM_PREVIEW_MAX_CHARS})`,
  inputTokens: subagentBatchItems.inputTokens,
  outputTokens: subagentBatchItems.outputTokens,
  // One primary-key probe per row of the page; the run row holds the count.
  toolCalls: sql<number>`coalesce((select r.tool_call_count from agent_runs r where r.id = ${subagentBatchItems.runId}), 0)`,
  startedAt: subagentBatchItems.startedAt,
  finishedAt: subagentBatchItems.finishedAt,
};

/**
 * One page of items in position order (keyset on position; the cursor is opaque), optionally
 * of one status. Never selects prompts or full results; previews and errors come cut.
 */
export async function listItems(
  db: DbOrTx,
  args: BatchScopeArgs & { status?: ItemStatus | string | null; cursor?: string | null; limit?: number },
): Promise<ItemPageResult> {
  const status = parseItemStatus(args.status);
  const after = args.cursor ? decodeCursor(args.cursor) : 0;
  const limit = args.limit ?? ITEM_PAGE_DEFAULT;
  if (!Number.isInteger(limit) || limit < 1 || limit > ITEM_PAGE_MAX)
    throw new AppError("validation_failed", `limit: must be a whole number between 1 and ${ITEM_PAGE_MAX}`);
  const batch = await getBatch(db, args);
  // The batch's counters answer a status with no items without reading any.
  if (status && countOf(batch, status) === 0) return { items: [], nextCursor: null };
  const i = subagentBatchItems;
  const rows = await db
    .select(itemSummaryColumns)
    .from(i)
    // The status as a literal (it is one of ITEM_STATUSES), so the planner can pick that
    // status's partial index, which a bound parameter never matches.
    .where(and(eq(i.batchId, args.batchId), gt(i.position, after), status ? sql`${i.status} = ${sql.raw(`'${status}'`)}` : undefined))
    .orderBy(asc(i.position))
    .limit(limit + 1);
  const more = rows.length > limit;
  const items = (more ? rows.slice(0, limit) : rows).map((r) => ({
    ...r,
    inputTokens: Number(r.inputTokens),
    outputTokens: Number(r.outputTokens),
  })) as ItemSummary[];
  return { items, nextCursor: more ? encodeCursor(items[items.length - 1]!.position) : null };
}

/**
 * The batch's results as JSONL lines in position order, starting after `afterPosition`.
 * Ownership is checked before this resolves (so a route can answer 404 before streaming);
 * the iterable then reads EXPORT_PAGE_ROWS rows at a time (keyset), so memory stays bounded
 * however many items the batch has.
 */
export async function exportResults(
  db: DbOrTx,
  args: BatchScopeArgs & { afterPosition?: number; pageRows?: number },
): Promise<AsyncIterable<ResultLine>> {
  await getBatch(db, args);
  const pageRows = Math.min(Math.max(args.pageRows ?? EXPORT_PAGE_ROWS, 1), 1_000);
  const batchId = args.batchId;
  const i = subagentBatchItems;
  return {
    async *[Symbol.asyncIterator]() {
      let after = args.afterPosition ?? 0;
      for (;;) {
        const rows = await db
          .select({
            itemKey: i.itemKey,
            input: i.input,
            position: i.position,
            status: i.status,
            attempts: i.attempts,
            result: i.result,
            error: i.error,
            inputTokens: i.inputTokens,
            outputTokens: i.outputTokens,
          })
          .from(i)
          .where(and(eq(i.batchId, batchId), gt(i.position, after)))
          .orderBy(asc(i.position))
          .limit(pageRows);
        for (const r of rows)
          yield {
            item_key: r.itemKey,
            input: r.input,
            position: r.position,
            status: r.status,
            attempts: r.attempts,
            result: r.result,
            error: r.error,
            usage: { input_tokens: Number(r.inputTokens), output_tokens: Number(r.outputTokens) },
          };
        if (rows.length < pageRows) return;
        after = rows[rows.length - 1]!.position;
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Controls

async function lockBatch(tx: DbOrTx, args: BatchScopeArgs): Promise<BatchRow> {
  checkIds(args);
  const [row] = await tx
    .select()
    .from(subagentBatches)
    .where(
      and(
        eq(subagentBatches.id, args.batchId),
        eq(subagentBatches.userId, args.userId),
        eq(subagentBatches.threadId, args.threadId),
      ),
    )
    .for("update");
  if (!row) throw notFound("batch");
  return row;
}

async function reread(tx: DbOrTx, batchId: string): Promise<BatchRow> {
  const [row] = await tx.select().from(subagentBatches).where(eq(subagentBatches.id, batchId));
  return row!;
}

/** Stops new claims; running items finish. Idempotent on a paused batch; 409 on a finished one. */
export async function pauseBatch(db: Db, args: BatchScopeArgs): Promise<BatchRow> {
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    if (batch.status === "paused") return batch;
    if (batch.status !== "queued" && batch.status !== "running")
      throw new AppError("conflict", `batch is ${batch.status}; only a queued or running batch can be paused`);
    await tx
      .update(subagentBatches)
      .set({ status: "paused", updatedAt: sql`now()` })
      .where(eq(subagentBatches.id, batch.id));
    return reread(tx, batch.id);
  });
}

/** Restarts claims of a paused batch. Idempotent on an active batch; 409 on a finished one. */
export async function resumeBatch(db: Db, args: BatchScopeArgs): Promise<BatchRow> {
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    if (batch.status === "queued" || batch.status === "running") return batch;
    if (batch.status !== "paused")
      throw new AppError("conflict", `batch is ${batch.status}; only a paused batch can be resumed`);
    await assertResumable(tx, batch);
    await tx
      .update(subagentBatches)
      .set({ status: batch.startedAt ? "running" : "queued", updatedAt: sql`now()` })
      .where(eq(subagentBatches.id, batch.id));
    await notify(tx, "resume", batch.id);
    return reread(tx, batch.id);
  });
}

/**
 * One transaction: the batch becomes cancelled and every nonterminal item cancelled with its
 * lease cleared (counters move with them). A worker still running one of them finds its lease
 * gone: it aborts the model call and its late completion is fenced out. Idempotent on a
 * cancelled batch; 409 on a completed or failed one.
 */
export async function cancelBatch(db: Db, args: BatchScopeArgs): Promise<BatchRow> {
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    if (batch.status === "cancelled") return batch;
    if (!(ACTIVE as readonly string[]).includes(batch.status))
      throw new AppError("conflict", `batch is already ${batch.status}`);
    await tx
      .update(subagentBatches)
      .set({ status: "cancelled", finishedAt: sql`now()`, updatedAt: sql`now()` })
      .where(eq(subagentBatches.id, batch.id));
    await tx.execute(sql`
      with cur as (
        select id, status as old_status, attempts, lease_owner, leased_at, started_at
          from subagent_batch_items
         where batch_id = ${batch.id} and status in ('pending', 'queued', 'leased', 'running')
           for update
      ),
      upd as (
        update subagent_batch_items it
           set status = 'cancelled', lease_owner = null, lease_expires_at = null,
               available_at = null, finished_at = now(), updated_at = now()
          from cur where it.id = cur.id
        returning it.id
      )
      insert into subagent_batch_item_attempts (item_id, batch_id, attempt, worker_id, outcome, error, leased_at, started_at, finished_at)
      select cur.id, ${batch.id}::uuid, cur.attempts, coalesce(cur.lease_owner, 'unknown'), 'cancelled', 'batch cancelled',
             coalesce(cur.leased_at, now()), case when cur.old_status = 'running' then cur.started_at end, now()
        from cur where cur.old_status in ('leased', 'running')
    `);
    await notify(tx, "cancel", batch.id);
    return reread(tx, batch.id);
  });
}

/**
 * A failed item back to work with fresh attempts (queued when the live window has room,
 * otherwise pending, so the window still bounds live work). Reopens a completed or failed
 * batch. 409 for an item that is not failed or a cancelled batch.
 */
export async function retryItem(
  db: Db,
  args: BatchScopeArgs & { itemId: string },
): Promise<{ batch: BatchRow; item: ItemSummary }> {
  checkIds(args);
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    const [item] = await tx
      .select({ id: subagentBatchItems.id, status: subagentBatchItems.status })
      .from(subagentBatchItems)
      .where(and(eq(subagentBatchItems.id, args.itemId), eq(subagentBatchItems.batchId, batch.id)))
      .for("update");
    if (!item) throw notFound("item");
    if (batch.status === "cancelled") throw new AppError("conflict", "batch is cancelled; its items cannot be retried");
    if (item.status !== "failed")
      throw new AppError("conflict", `item is ${item.status}; only a failed item can be retried`);
    if (batch.status === "completed" || batch.status === "failed")
      await tx
        .update(subagentBatches)
        .set({ status: "running", finishedAt: null, updatedAt: sql`now()` })
        .where(eq(subagentBatches.id, batch.id));
    const live = batch.queuedCount + batch.leasedCount + batch.runningCount;
    const next = live < batch.maxLiveItems ? "queued" : "pending";
    await tx
      .update(subagentBatchItems)
      .set({
        status: next,
        attempts: 0,
        deferrals: 0,
        availableAt: null,
        error: null,
        finishedAt: null,
        startedAt: null,
        updatedAt: sql`now()`,
      })
      .where(eq(subagentBatchItems.id, item.id));
    await notify(tx, "retry", batch.id);
    const page = await tx
      .select(itemSummaryColumns)
      .from(subagentBatchItems)
      .where(eq(subagentBatchItems.id, item.id));
    const row = page[0]!;
    return {
      batch: await reread(tx, batch.id),
      item: { ...row, inputTokens: Number(row.inputTokens), outputTokens: Number(row.outputTokens) } as ItemSummary,
    };
  });
}
