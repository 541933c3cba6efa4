import "server-only";
import { and, eq } from "drizzle-orm";
import type postgres from "postgres";
import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import { requireUser } from "@/server/auth/authenticate";
import type { BatchAction } from "@/lib/api/batch-controls";
import { COMPARE_CHANGES } from "@/lib/api/compare";
import { GOLDEN_PAGE_MAX } from "@/lib/api/golden-sets";
import { reviewStateSchema } from "@/lib/api/reviews";
import { type BatchScopeArgs, getBatch, ownedBatch } from "@/server/batches/owned";
import { batchControls } from "@/server/batches/repository";
import type { BatchRow } from "@/server/batches/types";
import { getThreadForUser } from "@/server/chat/threads";
import { getConfig } from "@/server/config/load";
import { type Db, getDatabase } from "@/server/db/client";
import { subagentBatches, subagentBatchItems } from "@/server/db/schema";
import { AppError, notFound, zodMessage } from "@/server/errors";
import { parseParam } from "@/server/http/route";
import { countLiveWorkers, livenessWindowSeconds } from "@/server/runtime/heartbeat";

/**
 * The shared prologue of every batch route: authenticate (401 / cross-site 403), validate the
 * path ids (malformed → 404) and resolve the thread for this owner (anything else → 404).
 * Repository calls then carry the same user + thread scope.
 */

const idSchema = z.uuid();

export interface ThreadScope {
  db: Db;
  /** The raw driver of the same pool (server-side cursors). */
  sql: postgres.Sql;
  config: FlotillaConfig;
  userId: string;
  threadId: string;
}

export interface BatchScope extends ThreadScope {
  batchId: string;
}

export async function threadScope(req: Request, params: { threadId: string }): Promise<ThreadScope> {
  const { userId } = await requireUser(req);
  const threadId = parseParam(idSchema, params.threadId, "thread");
  const { db, sql } = getDatabase();
  await getThreadForUser(db, { userId, threadId });
  return { db, sql, config: getConfig(), userId, threadId };
}

export async function batchScope(req: Request, params: { threadId: string; batchId: string }): Promise<BatchScope> {
  const { userId } = await requireUser(req);
  // Validate every id before touching the database so a malformed one is a cheap 404.
  const threadId = parseParam(idSchema, params.threadId, "thread");
  const batchId = parseParam(idSchema, params.batchId, "batch");
  const { db, sql } = getDatabase();
  await getThreadForUser(db, { userId, threadId });
  return { db, sql, config: getConfig(), userId, threadId, batchId };
}

/** A golden set's routes: the caller and the set id (a malformed one is a 404 like any unknown set). */
export async function goldenSetScope(req: Request, params: { setId: string }): Promise<{ db: Db; config: FlotillaConfig; userId: string; setId: string }> {
  const { userId } = await requireUser(req);
  const setId = parseParam(idSchema, params.setId, "golden set");
  return { db: getDatabase().db, config: getConfig(), userId, setId };
}

/** The other batch of a comparison (any batch of the caller's): malformed → 404 as any id. */
export function parseOtherBatchId(value: string): string {
  return parseParam(idSchema, value, "batch");
}

/**
 * The prologue of a comparison's pages: the batch scope, the other batch's id, and the page query
 * (`change`, `cursor`, `limit`) with the preview length the pairs are cut to.
 */
export async function comparePageScope(req: Request, params: { threadId: string; batchId: string; otherId: string }) {
  const scope = await batchScope(req, params);
  const query = parseCompareQuery(new URL(req.url).searchParams);
  const args = { userId: scope.userId, threadId: scope.threadId, batchId: scope.batchId, otherId: parseOtherBatchId(params.otherId) };
  return { db: scope.db, config: scope.config, args, query, previewMaxChars: scope.config.subagent_batches.result_preview_max_chars };
}

export function parseItemId(value: string): string {
  return parseParam(idSchema, value, "item");
}

/** 404 unless the item belongs to this owner's batch in this thread (checked before anything else can answer). */
export async function assertItemInBatch(db: Db, scope: BatchScope & { itemId: string }): Promise<void> {
  const [row] = await db
    .select({ id: subagentBatchItems.id })
    .from(subagentBatchItems)
    .innerJoin(subagentBatches, eq(subagentBatches.id, subagentBatchItems.batchId))
    .where(and(eq(subagentBatchItems.id, scope.itemId), ownedBatch(scope)))
    .limit(1);
  if (!row) throw notFound("item");
}

/**
 * `?status=&verdict=&review=&check=&check_result=&q=&cursor=&limit=` of an item page. Unknown or
 * repeated parameters are refused; the filters and the cursor are checked by the repository (it owns their vocabularies).
 */
/** A page size from the query string: a whole number from 1 to `max`. */
function limitParam(max: number) {
  const message = `must be a whole number between 1 and ${max}`;
  return z
    .string()
    .regex(/^\d{1,4}$/, message)
    .transform(Number)
    .pipe(z.number().min(1, message).max(max, message))
    .optional();
}

const itemPageQuerySchema = z
  .object({
    status: z.string().optional(),
    verdict: z.string().optional(),
    review: z.string().optional(),
    check: z.string().optional(),
    check_result: z.string().optional(),
    q: z.string().optional(),
    cursor: z.string().optional(),
    limit: limitParam(200),
  })
  .strict();

export function parseItemPageQuery(params: URLSearchParams): {
  status?: string;
  verdict?: string;
  review?: string;
  check?: string;
  check_result?: string;
  q?: string;
  cursor?: string;
  limit?: number;
} {
  return parseQuery(itemPageQuerySchema, params);
}

const compareQuerySchema = z
  .object({
    change: z.enum(COMPARE_CHANGES, { error: `must be one of ${COMPARE_CHANGES.join(", ")}` }).optional(),
    cursor: itemPageQuerySchema.shape.cursor,
    limit: itemPageQuerySchema.shape.limit,
  })
  .strict();

/** `?change=&cursor=&limit=` of a comparison's pairs. */
export function parseCompareQuery(params: URLSearchParams): z.output<typeof compareQuerySchema> {
  return parseQuery(compareQuerySchema, params);
}

const reviewQuerySchema = z
  .object({
    state: reviewStateSchema.optional(),
    batch_id: z.uuid({ error: "must be a batch id" }).optional(),
    cursor: z.string().optional(),
    limit: limitParam(100),
  })
  .strict();

/** `?state=&batch_id=&cursor=&limit=` of the review queue. */
export function parseReviewQuery(params: URLSearchParams): z.output<typeof reviewQuerySchema> {
  return parseQuery(reviewQuerySchema, params);
}

const goldenItemsQuerySchema = z
  .object({
    version: z.string().regex(/^[1-9]\d{0,8}$/, "must be a version number (1, 2, ...)").transform(Number).optional(),
    cursor: z.string().optional(),
    limit: limitParam(GOLDEN_PAGE_MAX),
  })
  .strict();

/** `?version=&cursor=&limit=` of a golden set's items page; the download takes `version` alone. */
export function parseGoldenItemsQuery(params: URLSearchParams, page = true): z.output<typeof goldenItemsQuerySchema> {
  return parseQuery(page ? goldenItemsQuerySchema : goldenItemsQuerySchema.pick({ version: true }), params);
}

/** A strict query string: each name once, no unknown names, 400s naming the parameter. */
function parseQuery<S extends z.ZodType>(schema: S, params: URLSearchParams): z.output<S> {
  const query: Record<string, string> = {};
  for (const [name, value] of params) {
    if (name in query) throw new AppError("validation_failed", `${name}: given more than once`);
    query[name] = value;
  }
  const parsed = schema.safeParse(query);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    if (issue?.code === "unrecognized_keys")
      throw new AppError("validation_failed", `${issue.keys[0]}: unknown query parameter`);
    throw new AppError("validation_failed", zodMessage(parsed.error));
  }
  return parsed.data;
}

/**
 * A batch control (lib/api/batch-controls.ts) as every face applies it: 404 before 503 (an
 * unknown batch is unknown whether or not a worker runs), 409 when the state forbids it.
 */
export async function applyBatchControl(
  db: Db,
  config: FlotillaConfig,
  scope: BatchScopeArgs,
  action: BatchAction,
): Promise<BatchRow> {
  await getBatch(db, scope);
  await requireLiveWorker(db, config);
  return batchControls[action](db, scope);
}

/** Controls change what workers do; without a live worker they would silently never take effect. */
export async function requireLiveWorker(db: Db, config: FlotillaConfig): Promise<void> {
  const live = await countLiveWorkers(db, livenessWindowSeconds(config.subagent_batches.lease_seconds));
  if (live === 0)
    throw new AppError(
      "worker_unavailable",
      "no batch worker is running, so this control cannot take effect; start one with `npm run worker` and try again",
    );
}

/** Checks a response against its projection schema; a mismatch is a server bug (500), never a client error. */
export function project<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new Error(`projection mismatch: ${parsed.error.message}`);
  return parsed.data;
}
