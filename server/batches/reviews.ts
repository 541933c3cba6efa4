import { and, asc, eq, gt, inArray, isNotNull, or, sql, type SQL } from "drizzle-orm";
import type { ReviewEntry, ReviewPage } from "@/lib/api/review-queue";
import type { ItemReview, ReviewState } from "@/lib/api/reviews";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatches, subagentBatchItems, threads } from "@/server/db/schema";
import { storable, storableText } from "@/server/db/storable";
import { AppError, notFound } from "@/server/errors";
import { jsonValueProblem } from "@/lib/batch-rules";
import { prepareOutputSchema, validateAnswer } from "@/server/runtime/output-schema";
import { matchingAs } from "@/server/runtime/pattern-thread";
import { type BatchScopeArgs, checkIds, getBatch } from "./owned";
import { ITEM_INPUT_MAX_CHARS } from "./repository";
import { reviewColumns, toReview } from "./review-columns";
import { batchTitle } from "./title";

/**
 * A person's reviews of batch items (DESIGN "Judging a batch"): an item joins the queue by its
 * batch's policy when it finishes (settle.sql, review.sql) or by hand; a decision accepts or
 * rejects it, with a note and an optional corrected answer checked against the batch's
 * output_schema. Decisions are optimistic: each names the version it saw, and one conditional
 * UPDATE decides, so of two decisions on one version exactly one wins and the other is a 409.
 */

export type ItemScope = BatchScopeArgs & { itemId: string };

const FINISHED = ["succeeded", "failed", "cancelled"] as const;

/** Queues one item by hand (idempotent while it waits); a decided item goes back to the queue. */
export async function requestReview(db: DbOrTx, scope: ItemScope): Promise<ItemReview> {
  checkIds(scope);
  const batch = await getBatch(db, scope);
  const i = subagentBatchItems;
  const [row] = await db
    .update(i)
    .set({
      reviewState: "pending",
      reviewRequestedAt: sql`case when ${i.reviewState} = 'pending' then ${i.reviewRequestedAt} else now() end`,
      // Back from a decision is a new version (a decision made on the old one is stale).
      reviewVersion: sql`case when ${i.reviewState} is null or ${i.reviewState} = 'pending' then ${i.reviewVersion} else ${i.reviewVersion} + 1 end`,
    })
    .where(and(eq(i.id, scope.itemId), eq(i.batchId, batch.id), inArray(i.status, [...FINISHED])))
    .returning(reviewColumns());
  if (row) return toReview(row)!;
  await itemExists(db, batch.id, scope.itemId);
  throw new AppError("conflict", "item: has not finished yet; review it once it has an answer");
}

export interface Decision {
  decision: "accept" | "reject";
  note?: string;
  output?: unknown;
  version: number;
}

/**
 * The most a corrected answer may hold: 64 KiB of JSON (a fixed cap, outside the storage quota;
 * four times an `expected`, which a corrected answer becomes in a golden set).
 */
export const REVIEW_OUTPUT_MAX_BYTES = 64 * 1024;

/**
 * Decides one item's review at the version the person saw: 409 and nothing decided when it moved
 * on. The version and state are read before a corrected answer is checked, so a stale decision
 * costs one lookup whatever it carries; the answer is then bounded (depth, size) and validated as
 * a model's answer is (inline when small, else in the matching thread under its time limit).
 */
export async function decideReview(db: DbOrTx, scope: ItemScope & Decision): Promise<ItemReview> {
  checkIds(scope);
  const batch = await getBatch(db, scope);
  if (scope.output !== undefined) {
    assertDecidable(await itemExists(db, batch.id, scope.itemId), scope.version);
    const schema = (batch.executionSpec as { output_schema?: unknown }).output_schema;
    await matchingAs(scope.userId, () => checkCorrected(scope.output, schema));
  }
  const i = subagentBatchItems;
  const [row] = await db
    .update(i)
    .set({
      reviewState: scope.decision === "accept" ? "accepted" : "rejected",
      reviewNote: scope.note === undefined ? null : storableText(scope.note),
      reviewedOutput: scope.output === undefined ? null : storable(scope.output),
      reviewedAt: sql`now()`,
      reviewVersion: sql`${i.reviewVersion} + 1`,
      reviewRequestedAt: sql`coalesce(${i.reviewRequestedAt}, now())`,
    })
    .where(
      and(eq(i.id, scope.itemId), eq(i.batchId, batch.id), eq(i.reviewVersion, scope.version), inArray(i.status, [...FINISHED])),
    )
    .returning(reviewColumns());
  if (row) return toReview(row)!;
  assertDecidable(await itemExists(db, batch.id, scope.itemId), scope.version);
  throw new AppError("conflict", "version: the review moved on meanwhile; reload it and decide again");
}

/** 409 when the item has not finished or its review is at another version. */
function assertDecidable(current: { status: string; reviewVersion: number }, version: number): void {
  if (!(FINISHED as readonly string[]).includes(current.status))
    throw new AppError("conflict", "item: has not finished yet; review it once it has an answer");
  if (current.reviewVersion !== version)
    throw new AppError("conflict", `version: the review is at version ${current.reviewVersion} now (someone decided since); reload it and decide again`);
}

/**
 * A corrected answer must be what the batch asks for: valid against its output_schema, else a
 * string; nested at most MAX_JSON_DEPTH levels and at most REVIEW_OUTPUT_MAX_BYTES as JSON, with
 * text jsonb stores, as a submission's `expected` is.
 */
async function checkCorrected(output: unknown, schema: unknown): Promise<void> {
  const problem = jsonValueProblem(output, REVIEW_OUTPUT_MAX_BYTES);
  if (problem) throw new AppError("validation_failed", `output: ${problem}`);
  if (schema === undefined || schema === null) {
    if (typeof output !== "string") throw new AppError("validation_failed", "output: must be a string (this batch's answers are text)");
    return;
  }
  const checked = await validateAnswer(prepareOutputSchema(schema), JSON.stringify(output), output);
  if (!checked.ok)
    throw new AppError("validation_failed", checked.timedOut ? `output: ${checked.errors}` : `output: does not match the batch's output_schema: ${checked.errors}`);
}

async function itemExists(db: DbOrTx, batchId: string, itemId: string): Promise<{ status: string; reviewVersion: number }> {
  const i = subagentBatchItems;
  const [row] = await db
    .select({ status: i.status, reviewVersion: i.reviewVersion })
    .from(i)
    .where(and(eq(i.id, itemId), eq(i.batchId, batchId)));
  if (!row) throw notFound("item");
  return row;
}

// The queue's cursor: the last entry's (requested_at, id), opaque to clients.
function encodeQueueCursor(at: Date, id: string): string {
  return Buffer.from(`r1:${at.toISOString()}:${id}`, "utf8").toString("base64url");
}
function decodeQueueCursor(cursor: string): { at: Date; id: string } {
  const text = /^[A-Za-z0-9_-]{1,120}$/.test(cursor) ? Buffer.from(cursor, "base64url").toString("utf8") : "";
  const match = /^r1:(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z):([0-9a-f-]{36})$/.exec(text);
  if (!match || Number.isNaN(Date.parse(match[1]!))) throw new AppError("validation_failed", "cursor: not a cursor returned by this API");
  return { at: new Date(match[1]!), id: match[2]! };
}

export const REVIEW_PAGE_MAX = 100;

/** The caller's review queue across batches, oldest first (keyset on when each joined it). */
export async function listReviews(
  db: DbOrTx,
  args: { userId: string; state: ReviewState; batchId?: string; cursor?: string; limit: number; previewMaxChars: number },
): Promise<ReviewPage> {
  const i = subagentBatchItems;
  const b = subagentBatches;
  const after = args.cursor ? decodeQueueCursor(args.cursor) : null;
  if (args.batchId !== undefined) checkIds({ threadId: "00000000-0000-0000-0000-000000000000", batchId: args.batchId });
  const where: (SQL | undefined)[] = [
    sql`${i.reviewState} = ${sql.raw(`'${args.state}'`)}`,
    eq(b.userId, args.userId),
    isNotNull(i.reviewRequestedAt),
    args.batchId ? eq(i.batchId, args.batchId) : undefined,
    after ? or(gt(i.reviewRequestedAt, after.at), and(eq(i.reviewRequestedAt, after.at), gt(i.id, after.id))) : undefined,
  ];
  const rows = await db
    .select({
      batchId: i.batchId,
      threadId: b.threadId,
      threadTitle: threads.title,
      executionSpec: sql<unknown>`jsonb_build_object('prompt_template', ${b.executionSpec} -> 'prompt_template')`,
      subagent: b.subagent,
      itemId: i.id,
      itemKey: i.itemKey,
      input: sql<string>`left(${i.input}, ${ITEM_INPUT_MAX_CHARS * 10})`,
      expected: i.expected,
      status: i.status,
      output: sql<unknown>`coalesce(${i.output}, to_jsonb(left(${i.result}, ${args.previewMaxChars * 10})))`,
      reviewedOutput: i.reviewedOutput,
      checks: i.checks,
      verdict: i.verdict,
      error: i.error,
      outputSchema: sql<unknown>`${b.executionSpec} -> 'output_schema'`,
      requestedAt: i.reviewRequestedAt,
      ...reviewColumns(),
    })
    .from(i)
    .innerJoin(b, eq(b.id, i.batchId))
    .innerJoin(threads, eq(threads.id, b.threadId))
    .where(and(...where))
    .orderBy(asc(i.reviewRequestedAt), asc(i.id))
    .limit(args.limit + 1);
  const [{ pending }] = (await db
    .select({ pending: sql<number>`count(*)::int` })
    .from(i)
    .innerJoin(b, eq(b.id, i.batchId))
    .where(and(sql`${i.reviewState} = 'pending'`, eq(b.userId, args.userId), args.batchId ? eq(i.batchId, args.batchId) : undefined))) as [
    { pending: number },
  ];
  const more = rows.length > args.limit;
  const page = more ? rows.slice(0, args.limit) : rows;
  const last = page.at(-1);
  const items: ReviewEntry[] = page.map((r) => ({
    batch_id: r.batchId,
    batch_title: batchTitle(r),
    thread_id: r.threadId,
    thread_title: r.threadTitle,
    item_id: r.itemId,
    item_key: r.itemKey,
    input: r.input,
    ...(r.expected === null ? {} : { expected: r.expected }),
    status: r.status,
    output: r.output ?? null,
    ...(r.reviewedOutput === null ? {} : { reviewed_output: r.reviewedOutput }),
    checks: r.checks ?? [],
    verdict: r.verdict,
    error: r.error,
    review: toReview(r)!,
    output_schema: r.outputSchema ?? null,
    requested_at: r.requestedAt!.toISOString(),
  }));
  return { items, next_cursor: more && last ? encodeQueueCursor(last.requestedAt!, last.itemId) : null, pending };
}

/** Per batch: its reviews by state, and per judge check the share of decided items where the judge agreed with the person. */
export interface ReviewFigures {
  counts: Record<ReviewState, number>;
  agreement: Map<string, number | null>;
}

export async function loadReviewFigures(db: DbOrTx, batchIds: string[]): Promise<Map<string, ReviewFigures>> {
  const out = new Map<string, ReviewFigures>();
  if (batchIds.length === 0) return out;
  const i = subagentBatchItems;
  const rows = await db
    .select({ batchId: i.batchId, state: i.reviewState, n: sql<number>`count(*)::int` })
    .from(i)
    .where(and(inArray(i.batchId, batchIds), isNotNull(i.reviewState)))
    .groupBy(i.batchId, i.reviewState);
  for (const r of rows) {
    const entry = out.get(r.batchId) ?? { counts: { pending: 0, accepted: 0, rejected: 0 }, agreement: new Map() };
    entry.counts[r.state!] = r.n;
    out.set(r.batchId, entry);
  }
  const decided = [...out.entries()].filter(([, v]) => v.counts.accepted + v.counts.rejected > 0).map(([id]) => id);
  if (decided.length > 0) {
    const agreement = await db.execute<{ batch_id: string; name: string; agree: number; total: number }>(sql`
      select x.batch_id, e ->> 'name' as name,
             count(*) filter (where (e ->> 'passed')::boolean = (x.review_state = 'accepted'))::int as agree,
             count(*)::int as total
        from subagent_batch_items x, jsonb_array_elements(x.checks) e
       where x.batch_id in (${sql.join(decided.map((id) => sql`${id}::uuid`), sql`, `)})
         and x.review_state in ('accepted', 'rejected') and x.checks is not null
       group by 1, 2`);
    for (const r of agreement) out.get(r.batch_id)!.agreement.set(r.name, r.total === 0 ? null : r.agree / r.total);
  }
  return out;
}
