import { type ReviewState, reviewStateSchema } from "@/lib/api/reviews";
import { and, asc, desc, eq, gt, sql } from "drizzle-orm";
import { type BatchAction, type BatchControlName, type BatchEvent, planControl } from "@/lib/api/batch-controls";
import { type Verdict, verdictSchema } from "@/lib/api/batch-data";
import type { BatchStatus } from "@/lib/api/batches";
import type { BatchRetry } from "@/lib/api/batches";
import { configSchema, type FlotillaConfig } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { inIndexOrder } from "@/server/db/index-order";
import { subagentBatches, subagentBatchItems } from "@/server/db/schema";
import { ITEM_STATUSES, type ItemStatus } from "@/server/db/schema/batches";
import { AppError, notFound } from "@/server/errors";
import { assertResumable } from "./budget";
import { decodeCursor, encodeCursor } from "./cursor";
import { BATCH_CHANNEL, batchEventPayload } from "./notify";
import { type BatchScopeArgs, checkIds, getBatch, lockBatch, threadBatches } from "./owned";
import { assertCorrectedTotal, correctedItem } from "./retry-input";
import { specColumns } from "./spec";
import { admitWork, lockUserWork } from "./submit";
import type { BatchRow, ItemPageResult, ItemSummary } from "./types";
import { reviewColumns } from "./review-columns";

/**
 * Owner-facing batch repository. Every function takes the database first and one object
 * argument, and every read or mutation is scoped by (userId, threadId): a batch of someone
 * else, or of another thread, is "not found". Worker-side transitions live in claim.ts.
 */

export type { BatchRow, ItemPageResult, ItemSummary } from "./types";
export { type BatchScopeArgs, getBatch };

export const ITEM_PAGE_MAX = 200;
export const ITEM_PAGE_DEFAULT = 50;
export const BATCH_LIST_MAX = 100;
/**
 * Item rows carry previews and errors cut to subagent_batches.result_preview_max_chars (the one
 * preview cap; callers pass the configured value, others get its default).
 */
const DEFAULT_CONFIG = configSchema.parse({});
export const DEFAULT_PREVIEW_MAX_CHARS = DEFAULT_CONFIG.subagent_batches.result_preview_max_chars;
/** Item rows carry their input cut to this; the JSONL export carries it whole. */
export const ITEM_INPUT_MAX_CHARS = 200;

async function notify(db: DbOrTx, event: BatchEvent, batchId: string): Promise<void> {
  // Delivered at commit; a rolled-back transaction sends nothing.
  await db.execute(sql`select pg_notify(${BATCH_CHANNEL}, ${batchEventPayload(event, batchId)})`);
}

// ---------------------------------------------------------------------------------------------
// Reads

/** The thread's batches, or without a thread all of the owner's, newest first (at most `limit`, 1..BATCH_LIST_MAX). */
export async function listBatches(
  db: DbOrTx,
  args: { userId: string; threadId?: string; limit?: number },
): Promise<BatchRow[]> {
  const { threadId, limit = BATCH_LIST_MAX } = args;
  if (threadId !== undefined) checkIds({ threadId });
  if (!Number.isInteger(limit) || limit < 1 || limit > BATCH_LIST_MAX)
    throw new AppError("validation_failed", `limit: must be a whole number between 1 and ${BATCH_LIST_MAX}`);
  return db
    .select()
    .from(subagentBatches)
    .where(threadId === undefined ? eq(subagentBatches.userId, args.userId) : threadBatches({ userId: args.userId, threadId }))
    .orderBy(desc(subagentBatches.createdAt), desc(subagentBatches.id))
    .limit(limit);
}

export function parseItemStatus(value: string | null | undefined): ItemStatus | undefined {
  if (value === null || value === undefined || value === "") return undefined;
  if (!(ITEM_STATUSES as readonly string[]).includes(value))
    throw new AppError("validation_failed", `status: must be one of ${ITEM_STATUSES.join(", ")}`);
  return value as ItemStatus;
}

export function parseVerdict(value: string | null | undefined): Verdict | undefined {
  if (value === null || value === undefined || value === "") return undefined;
  const parsed = verdictSchema.safeParse(value);
  if (!parsed.success) throw new AppError("validation_failed", `verdict: must be one of ${verdictSchema.options.join(", ")}`);
  return parsed.data;
}

function countOf(batch: BatchRow, status: ItemStatus): number {
  const counts: Record<ItemStatus, number> = {
    pending: batch.pendingCount,
    queued: batch.queuedCount,
    leased: batch.leasedCount,
    running: batch.runningCount,
    awaiting_approval: batch.awaitingApprovalCount,
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
  cachedInputTokens: subagentBatchItems.cachedInputTokens,
  cacheWriteTokens: subagentBatchItems.cacheWriteTokens,
  // Each attempt's tokens, each model's (the item's, a judge's) at its own price snapshot (settle.sql).
  costUsd: subagentBatchItems.costUsd,
  // One primary-key probe per row of the page; the run row holds the count.
  toolCalls: sql<number>`coalesce((select r.tool_call_count from agent_runs r where r.id = ${subagentBatchItems.runId}), 0)`,
  // jsonb's text is at most 1.5x the compact JSON (a space after each , and :), so an output
  // whose stored text is longer cannot fit the cap and is never read; toItemProjection measures the rest.
  output: sql<unknown>`case when length(${subagentBatchItems.output}::text) <= ${Math.ceil(previewMaxChars * 1.5) + 2}::int then ${subagentBatchItems.output} end`,
  // The expected value and a person's corrected answer, bounded like the output (each at most 1.5x its compact JSON).
  expected: sql<unknown>`case when length(${subagentBatchItems.expected}::text) <= ${Math.ceil(previewMaxChars * 1.5) + 2}::int then ${subagentBatchItems.expected} end`,
  reviewedOutput: sql<unknown>`case when length(${subagentBatchItems.reviewedOutput}::text) <= ${Math.ceil(previewMaxChars * 1.5) + 2}::int then ${subagentBatchItems.reviewedOutput} end`,
  checks: subagentBatchItems.checks,
  verdict: subagentBatchItems.verdict,
  ...reviewColumns(),
  startedAt: subagentBatchItems.startedAt,
  finishedAt: subagentBatchItems.finishedAt,
});

/**
 * One page of items in position order (keyset on position; the cursor is opaque), optionally
 * of one status and one verdict. Never selects prompts or full results; previews and errors come cut.
 */
function parseReviewState(value: string | null | undefined): ReviewState | undefined {
  if (value === null || value === undefined) return undefined;
  const parsed = reviewStateSchema.safeParse(value);
  if (!parsed.success) throw new AppError("validation_failed", `review: ${parsed.error.issues[0]?.message}`);
  return parsed.data;
}

/**
 * The filters no index serves (one check's result in the jsonb `checks`, a text search) read at
 * most this many rows of the batch past the cursor per page, in the position index's order: a
 * page may come back short, even empty, with a cursor to walk on from the last row it read.
 */
export const UNINDEXED_WALK_ROWS = 2_000;
export const ITEM_SEARCH_MAX_CHARS = 200;

/** `?check=&check_result=`: one check of the batch, passed or failed; both or neither. */
function parseCheckFilter(batch: BatchRow, check: string | null | undefined, result: string | null | undefined): { name: string; passed: boolean } | undefined {
  const named = check !== null && check !== undefined && check !== "";
  const judged = result !== null && result !== undefined && result !== "";
  if (!named && !judged) return undefined;
  if (!judged || (result !== "passed" && result !== "failed"))
    throw new AppError("validation_failed", "check_result: must be passed or failed (with check)");
  if (!named) throw new AppError("validation_failed", "check: name the check that check_result is of");
  if (!specColumns(batch).checks.includes(check)) throw new AppError("validation_failed", `check: this batch has no check named ${JSON.stringify(check)}`);
  return { name: check, passed: result === "passed" };
}

function parseSearch(q: string | null | undefined): string | undefined {
  if (q === null || q === undefined || q.trim() === "") return undefined;
  if (q.length > ITEM_SEARCH_MAX_CHARS || q.includes("\0"))
    throw new AppError("validation_failed", `q: must be at most ${ITEM_SEARCH_MAX_CHARS} characters, without NUL`);
  return q.trim();
}

export async function listItems(
  db: DbOrTx,
  args: BatchScopeArgs & {
    status?: ItemStatus | string | null;
    verdict?: Verdict | string | null;
    /** Items of one review state (their partial index serves the page). */
    review?: string | null;
    /** One check's result: `check` names it, `check_result` is passed or failed (a bounded walk). */
    check?: string | null;
    check_result?: string | null;
    /** Text in the item key, the input or the answer, any case (a bounded walk). */
    q?: string | null;
    cursor?: string | null;
    limit?: number;
    /** subagent_batches.result_preview_max_chars */
    previewMaxChars?: number;
  },
): Promise<ItemPageResult> {
  const status = parseItemStatus(args.status);
  const verdict = parseVerdict(args.verdict);
  const review = parseReviewState(args.review);
  const after = args.cursor ? decodeCursor(args.cursor) : 0;
  const limit = args.limit ?? ITEM_PAGE_DEFAULT;
  if (!Number.isInteger(limit) || limit < 1 || limit > ITEM_PAGE_MAX)
    throw new AppError("validation_failed", `limit: must be a whole number between 1 and ${ITEM_PAGE_MAX}`);
  const batch = await getBatch(db, args);
  const check = parseCheckFilter(batch, args.check, args.check_result);
  const search = parseSearch(args.q);
  // The batch's counters answer a status with no items without reading any.
  if (status && countOf(batch, status) === 0) return { items: [], nextCursor: null };
  const verdicts = verdict === "passed" ? batch.verdictPassedCount : batch.verdictFailedCount;
  if (verdict && verdicts === 0) return { items: [], nextCursor: null };
  const i = subagentBatchItems;
  // The status as a literal (it is one of ITEM_STATUSES), so the planner can pick that
  // status's partial index, which a bound parameter never matches.
  // The verdict likewise: a failed verdict has its partial index.
  const indexed = and(
    eq(i.batchId, args.batchId),
    gt(i.position, after),
    status ? sql`${i.status} = ${sql.raw(`'${status}'`)}` : undefined,
    verdict ? sql`${i.verdict} = ${sql.raw(`'${verdict}'`)}` : undefined,
    review ? sql`${i.reviewState} is not null and ${i.reviewState} = ${sql.raw(`'${review}'`)}` : undefined,
  );
  const walked = check !== undefined || search !== undefined;
  // In index order: the page reads only its rows even before the batch's rows are analyzed.
  const { rows, walkEnd } = await inIndexOrder(db, async (tx) => {
    // An unindexed filter walks at most UNINDEXED_WALK_ROWS rows past the cursor (the indexed
    // filters' index, position order): first the position of the last of them (null: fewer remain),
    // then the matches up to it. A page costs two index walks of at most that many rows, each row's
    // `checks` tested by containment and, searching, its key, input (cut as the page shows it),
    // answer preview and output text by strpos: never the whole batch.
    let end: number | null = null;
    if (walked) {
      const [last] = await tx.select({ position: i.position }).from(i).where(indexed).orderBy(asc(i.position)).offset(UNINDEXED_WALK_ROWS - 1).limit(1);
      end = last?.position ?? null;
    }
    const needle = search?.toLowerCase();
    const found = await tx
      .select(itemSummaryColumns(args.previewMaxChars))
      .from(i)
      .where(
        and(
          indexed,
          end === null ? undefined : sql`${i.position} <= ${end}`,
          check ? sql`${i.checks} @> ${JSON.stringify([{ name: check.name, passed: check.passed }])}::jsonb` : undefined,
          needle
            ? sql`(strpos(lower(${i.itemKey}), ${needle}) > 0
                   or strpos(lower(left(${i.input}, ${ITEM_INPUT_MAX_CHARS})), ${needle}) > 0
                   or strpos(lower(coalesce(${i.preview}, '')), ${needle}) > 0
                   or strpos(lower(coalesce(${i.output}::text, '')), ${needle}) > 0
                   or strpos(lower(coalesce(${i.reviewedOutput}::text, '')), ${needle}) > 0)`
            : undefined,
        ),
      )
      .orderBy(asc(i.position))
      .limit(limit + 1);
    return { rows: found, walkEnd: end };
  });
  const more = rows.length > limit;
  const items = (more ? rows.slice(0, limit) : rows).map((r) => ({
    ...r,
    inputTokens: Number(r.inputTokens),
    outputTokens: Number(r.outputTokens),
    cachedInputTokens: Number(r.cachedInputTokens),
    cacheWriteTokens: Number(r.cacheWriteTokens),
  })) as ItemSummary[];
  // A walk that stopped short of the batch's end goes on from where it stopped, even past an empty page.
  const nextCursor = more ? encodeCursor(items[items.length - 1]!.position) : walkEnd !== null ? encodeCursor(walkEnd) : null;
  return { items, nextCursor };
}

// ---------------------------------------------------------------------------------------------
// Controls

async function reread(tx: DbOrTx, batchId: string): Promise<BatchRow> {
  const [row] = await tx.select().from(subagentBatches).where(eq(subagentBatches.id, batchId));
  return row!;
}

/** The table's verdict for this batch: the move to make, null when already in effect, 409 otherwise. */
function checkControl(name: BatchControlName, batch: BatchRow): { next: BatchStatus; event: BatchEvent | null } | null {
  const plan = planControl(name, { status: batch.status, started: batch.startedAt !== null });
  if (plan.kind === "refused") throw new AppError("conflict", plan.message);
  return plan.kind === "move" ? plan : null;
}

async function notifyControl(tx: DbOrTx, plan: { event: BatchEvent | null }, batchId: string): Promise<void> {
  if (plan.event) await notify(tx, plan.event, batchId);
}

/** A control that only moves the batch's status (the table says to what), after an optional guard. */
function statusControl(name: "pause" | "resume", guard?: (tx: DbOrTx, batch: BatchRow) => Promise<void>) {
  return (db: DbOrTx, args: BatchScopeArgs): Promise<BatchRow> =>
    db.transaction(async (tx) => {
      const batch = await lockBatch(tx, args);
      const plan = checkControl(name, batch);
      if (!plan) return batch;
      await guard?.(tx, batch);
      // Resuming a batch its pilot paused runs the rest: the pilot no longer holds them back.
      const pilot = name === "resume" && batch.pauseReason === "pilot" ? { pilot: null } : {};
      await tx
        .update(subagentBatches)
        .set({ status: plan.next, ...pilot, updatedAt: sql`now()` })
        .where(eq(subagentBatches.id, batch.id));
      await notifyControl(tx, plan, batch.id);
      return reread(tx, batch.id);
    });
}

/** Stops new claims; running items finish. Idempotent on a paused batch; 409 on a finished one. */
export const pauseBatch = statusControl("pause");

/** Restarts claims of a paused batch (not one that would pause again at once). Idempotent on an active batch; 409 on a finished one. */
export const resumeBatch = statusControl("resume", assertResumable);

/**
 * One transaction: the batch becomes cancelled and every nonterminal item cancelled with its
 * lease cleared (counters move with them). A worker still running one of them finds its lease
 * gone: it aborts the model call and its late completion is fenced out. Idempotent on a
 * cancelled batch; 409 on a completed or failed one.
 */
export async function cancelBatch(db: DbOrTx, args: BatchScopeArgs): Promise<BatchRow> {
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    const plan = checkControl("cancel", batch);
    if (!plan) return batch;
    await tx
      .update(subagentBatches)
      .set({ status: plan.next, finishedAt: sql`now()`, updatedAt: sql`now()` })
      .where(eq(subagentBatches.id, batch.id));
    await tx.execute(sql`select flotilla_cancel_items(${batch.id}::uuid)`); // server/batches/sql/cancel.sql
    await notifyControl(tx, plan, batch.id);
    return reread(tx, batch.id);
  });
}

/** The batch controls by name, as the `[action]` route serves them. */
export const batchControls: Record<BatchAction, (db: DbOrTx, args: BatchScopeArgs) => Promise<BatchRow>> = {
  pause: pauseBatch,
  resume: resumeBatch,
  cancel: cancelBatch,
};

/**
 * Every finished item matching all the given filters back to work in one transaction (fresh
 * attempts, answer and verdict cleared, the live window respected, a finished batch reopened,
 * workers woken when anything moved). A retry is a submission (DESIGN "Holding under abuse (third
 * round)"): under the same per-user lock it passes the same quotas for what it moved, or moves
 * nothing (429). 400 for a check the batch does not have; 409 for a cancelled batch.
 * `{ retried: 0 }` when nothing matches.
 */
export async function retryBatch(
  db: DbOrTx,
  args: BatchScopeArgs & { filter: BatchRetry; config: FlotillaConfig },
): Promise<{ batch: BatchRow; retried: number }> {
  checkIds(args);
  return db.transaction(async (tx) => {
    await lockUserWork(tx, args.userId);
    const batch = await lockBatch(tx, args);
    const plan = checkControl("retry", batch);
    const { filter } = args;
    if (filter.check !== undefined && !specColumns(batch).checks.includes(filter.check))
      throw new AppError("validation_failed", `check: this batch has no check named ${JSON.stringify(filter.check)}`);
    const [row] = await tx.execute<{ retried: number }>(
      // server/batches/sql/retry.sql
      sql`select flotilla_retry_items(${batch.id}::uuid, ${filter.status ? sql`${`{${filter.status.join(",")}}`}::text[]` : sql`null`},
            ${filter.verdict === "failed"}, ${filter.check ?? null}) as retried`,
    );
    const retried = Number(row?.retried ?? 0);
    // Counted once moved (the filters are the SQL's); a refusal rolls the move back.
    if (retried > 0) await admitWork(tx, { userId: args.userId, config: args.config, items: retried, into: batch });
    if (plan && retried > 0) await notifyControl(tx, plan, batch.id);
    return { batch: retried > 0 ? await reread(tx, batch.id) : batch, retried };
  });
}

/** The statuses an item may be retried from: finished, and without a corrected input failed or with a failed verdict. */
function retryRefusal(item: { status: ItemStatus; verdict: string | null }, corrected: boolean): string | null {
  if (item.status !== "succeeded" && item.status !== "failed" && item.status !== "cancelled")
    return `item is ${item.status}; only a finished item can be retried`;
  if (corrected || item.status === "failed" || item.verdict === "failed") return null;
  return `item is ${item.status}; only a failed item (or one with a failed verdict) can be retried without a corrected input`;
}

/**
 * A finished item back to work with fresh attempts (queued when the live window has room,
 * otherwise pending, so the window still bounds live work); with `input`, a corrected input
 * checked like a submission item of this batch and its prompt rebuilt from the batch's
 * template (retry-input.ts), within the batch's total. The old attempts stay in the history.
 * Reopens a completed or failed batch. Like a submission, under the same per-user lock, it passes
 * the quotas (429). 409 for an unfinished item or a cancelled batch.
 */
export async function retryItem(
  db: DbOrTx,
  args: BatchScopeArgs & { itemId: string; input?: unknown; config: FlotillaConfig; previewMaxChars?: number },
): Promise<{ batch: BatchRow; item: ItemSummary }> {
  checkIds(args);
  return db.transaction(async (tx) => {
    await lockUserWork(tx, args.userId);
    const batch = await lockBatch(tx, args);
    const i = subagentBatchItems;
    const [item] = await tx
      .select({ id: i.id, itemKey: i.itemKey, status: i.status, verdict: i.verdict, prompt: i.prompt, input: i.input })
      .from(i)
      .where(and(eq(i.id, args.itemId), eq(i.batchId, batch.id)))
      .for("update");
    if (!item) throw notFound("item");
    // Reopening a finished batch (the table's `next`) happens in flotilla_retry_item.
    const plan = checkControl("retry", batch);
    const corrected = args.input !== undefined;
    const refusal = retryRefusal(item, corrected);
    if (refusal) throw new AppError("conflict", refusal);
    if (corrected) {
      const rebuilt = correctedItem(batch, item, args.input, args.config);
      await assertCorrectedTotal(tx, { batchId: batch.id, itemId: item.id, before: item.prompt, after: rebuilt.prompt, config: args.config });
      await tx
        .update(i)
        .set({ prompt: rebuilt.prompt, input: rebuilt.input, expected: rebuilt.expected ?? null })
        .where(eq(i.id, item.id));
    }
    await admitWork(tx, { userId: args.userId, config: args.config, items: 1, into: batch });
    await tx.execute(sql`select flotilla_retry_item(${batch.id}::uuid, ${item.id}::uuid)`); // server/batches/sql/retry.sql
    if (plan) await notifyControl(tx, plan, batch.id);
    const page = await tx.select(itemSummaryColumns(args.previewMaxChars)).from(i).where(eq(i.id, item.id));
    const row = page[0]!;
    return {
      batch: await reread(tx, batch.id),
      item: { ...row, inputTokens: Number(row.inputTokens), outputTokens: Number(row.outputTokens) } as ItemSummary,
    };
  });
}
