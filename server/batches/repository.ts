import { and, asc, desc, eq, gt, sql } from "drizzle-orm";
import { configSchema } from "@/lib/config";
import type { Db, DbOrTx } from "@/server/db/client";
import { subagentBatches, subagentBatchItems } from "@/server/db/schema";
import { ITEM_STATUSES, type ItemStatus } from "@/server/db/schema/batches";
import { AppError, notFound } from "@/server/errors";
import { assertResumable } from "./budget";
import { decodeCursor, encodeCursor } from "./cursor";
import { BATCH_CHANNEL, type BatchEvent, batchEventPayload } from "./notify";
import type { BatchRow, ItemPageResult, ItemSummary, ResultLine } from "./types";

/**
 * Owner-facing batch repository. Every function takes the database first and one object
 * argument, and every read or mutation is scoped by (userId, threadId): a batch of someone
 * else, or of another thread, is "not found". Worker-side transitions live in claim.ts.
 */

export type { BatchRow, ItemPageResult, ItemSummary, ResultLine } from "./types";

export const ITEM_PAGE_MAX = 200;
export const ITEM_PAGE_DEFAULT = 50;
export const BATCH_LIST_MAX = 100;
/**
 * Item rows carry previews and errors cut to subagent_batches.result_preview_max_chars (the one
 * preview cap; callers pass the configured value, others get its default).
 */
const DEFAULT_PREVIEW_MAX_CHARS = configSchema.parse({}).subagent_batches.result_preview_max_chars;
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

/** The columns of an item page row: previews and errors cut to `previewMaxChars`, never the prompt or the full result. */
export const itemSummaryColumns = (previewMaxChars = DEFAULT_PREVIEW_MAX_CHARS) => ({
  id: subagentBatchItems.id,
  batchId: subagentBatchItems.batchId,
  itemKey: subagentBatchItems.itemKey,
  input: sql<string>`left(${subagentBatchItems.input}, ${ITEM_INPUT_MAX_CHARS})`,
  position: subagentBatchItems.position,
  status: subagentBatchItems.status,
  attempts: subagentBatchItems.attempts,
  preview: sql<string | null>`left(${subagentBatchItems.preview}, ${previewMaxChars}::int)`,
  error: sql<string | null>`left(${subagentBatchItems.error}, ${previewMaxChars}::int)`,
  inputTokens: subagentBatchItems.inputTokens,
  outputTokens: subagentBatchItems.outputTokens,
  // One primary-key probe per row of the page; the run row holds the count.
  toolCalls: sql<number>`coalesce((select r.tool_call_count from agent_runs r where r.id = ${subagentBatchItems.runId}), 0)`,
  startedAt: subagentBatchItems.startedAt,
  finishedAt: subagentBatchItems.finishedAt,
});

/**
 * One page of items in position order (keyset on position; the cursor is opaque), optionally
 * of one status. Never selects prompts or full results; previews and errors come cut.
 */
export async function listItems(
  db: DbOrTx,
  args: BatchScopeArgs & {
    status?: ItemStatus | string | null;
    cursor?: string | null;
    limit?: number;
    /** subagent_batches.result_preview_max_chars */
    previewMaxChars?: number;
  },
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
    .select(itemSummaryColumns(args.previewMaxChars))
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
    await tx.execute(sql`select flotilla_cancel_items(${batch.id}::uuid)`); // server/batches/sql/cancel.sql
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
  args: BatchScopeArgs & { itemId: string; previewMaxChars?: number },
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
    await tx.execute(sql`select flotilla_retry_item(${batch.id}::uuid, ${item.id}::uuid)`); // server/batches/sql/retry.sql
    await notify(tx, "retry", batch.id);
    const page = await tx
      .select(itemSummaryColumns(args.previewMaxChars))
      .from(subagentBatchItems)
      .where(eq(subagentBatchItems.id, item.id));
    const row = page[0]!;
    return {
      batch: await reread(tx, batch.id),
      item: { ...row, inputTokens: Number(row.inputTokens), outputTokens: Number(row.outputTokens) } as ItemSummary,
    };
  });
}
