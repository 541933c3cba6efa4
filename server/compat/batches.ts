import { and, asc, desc, eq, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import { getSubagentDefinition, subagentNames } from "@/server/agent/registry";
import type { ItemRow } from "@/server/batches/insert-items";
import { cancelBatch } from "@/server/batches/repository";
import { buildExecutionSpec, type ExecutionKind } from "@/server/batches/spec";
import { writeBatch } from "@/server/batches/submit";
import type { BatchRow } from "@/server/batches/types";
import { createThread } from "@/server/chat/threads";
import type { Db, DbOrTx } from "@/server/db/client";
import { compatBatches, subagentBatches } from "@/server/db/schema";
import type { CompatApi } from "@/server/db/schema/compat";
import { AppError, notFound } from "@/server/errors";
import { catalogEntries, defaultModelName, findCatalogEntry } from "@/server/models/catalog";
import { CompatParamError } from "./errors";
import { storable } from "@/server/db/storable";
import { type CompatRequest, type LineError, type ModelCheck, promptOf, SUBAGENT_MODEL_PREFIX } from "./requests";

/**
 * Compatible batches over the durable batch engine. Each one is an ordinary batch in a thread of
 * its own (so the panel, pause / resume / retry, budgets, limits and metrics apply), plus a
 * compat_batches row with what the provider's object needs (input file, endpoint, window,
 * metadata, validation errors, cancel and expiry instants). Every read is owner-scoped.
 */

export type CompatBatchRow = typeof compatBatches.$inferSelect;
export interface CompatBatch {
  compat: CompatBatchRow;
  /** null for an OpenAI batch that failed validation (nothing ran). */
  batch: BatchRow | null;
}

/** The sub-agent definition recorded in the execution spec (the items run their own requests). */
const SPEC_SUBAGENT = "general";
/** Requests written per statement while a batch is created. */
const REQUEST_CHUNK_ROWS = 1_000;
const COMPLETION_WINDOW_SECONDS: Record<string, number> = { "24h": 24 * 3600 };

/** Checks a request's model: a catalog name, or `flotilla:<sub-agent>` naming a definition. */
export function modelChecker(config: FlotillaConfig): ModelCheck {
  return (name) => {
    if (name.startsWith(SUBAGENT_MODEL_PREFIX)) {
      try {
        getSubagentDefinition(name.slice(SUBAGENT_MODEL_PREFIX.length), config);
        return null;
      } catch {
        return `model ${JSON.stringify(name)} names no sub-agent of this deployment.`;
      }
    }
    if (findCatalogEntry(config, name)) return null;
    const known = catalogEntries(config).map((e) => e.name);
    return `model ${JSON.stringify(name)} is not in this deployment's catalog (known: ${known.join(", ")}).`;
  };
}

/** The catalog entry a batch's spec records (cost and rate limits are per entry); a sub-agent request records the default. */
function specModel(config: FlotillaConfig, name: string): { name: string; simulator: boolean } {
  const entry = findCatalogEntry(config, name.startsWith(SUBAGENT_MODEL_PREFIX) ? defaultModelName(config) : name);
  return { name: entry?.name ?? name, simulator: entry?.simulator ?? false };
}

export interface NewRequest {
  customId: string;
  request: CompatRequest;
}

/** A request as an item row: keyed by its custom_id; its prompt and input are the last user message. */
type RequestRow = ItemRow & { request: CompatRequest };

async function* requestChunks(requests: AsyncIterable<NewRequest>): AsyncIterable<RequestRow[]> {
  let rows: RequestRow[] = [];
  for await (const r of requests) {
    const prompt = promptOf(r.request);
    rows.push({ key: r.customId, prompt, input: prompt, request: r.request });
    if (rows.length >= REQUEST_CHUNK_ROWS) {
      yield rows;
      rows = [];
    }
  }
  if (rows.length > 0) yield rows;
}

/** Each written chunk's stored requests, joined to its items by position. */
async function storeRequests(tx: DbOrTx, written: { batchId: string; offset: number; items: RequestRow[] }): Promise<void> {
  const json = JSON.stringify(written.items.map((r) => r.request));
  await tx.execute(sql`
    insert into compat_requests (item_id, body)
    select i.id, t.v::jsonb
      from json_array_elements(${json}::json) with ordinality as t(v, ord)
      join subagent_batch_items i on i.batch_id = ${written.batchId}::uuid and i.position = ${written.offset}::int + t.ord
  `);
}

/**
 * Creates the thread, the durable batch (through the one writer, so the per-user quotas, the
 * daily token quota and the catalog price snapshot apply as to every batch), every item with
 * its stored request, and the compat row, in one transaction (nothing runs before it commits).
 * `requests` is a generator over the stored file for OpenAI, so memory stays bounded.
 */
export async function createCompatBatch(
  tx: DbOrTx,
  args: {
    userId: string;
    api: CompatApi;
    config: FlotillaConfig;
    title: string;
    total: number;
    /** The first request's model: recorded as the batch's model and priced (requests usually share one). */
    firstModel: string;
    requests: () => AsyncIterable<NewRequest>;
    inputFileId?: string;
    endpoint?: string;
    completionWindow: string;
    metadata?: Record<string, string> | null;
  },
): Promise<CompatBatch> {
  const b = args.config.subagent_batches;
  const thread = await createThread(tx, { userId: args.userId, title: args.title });
  const kind: ExecutionKind = args.api === "openai" ? "compat_openai" : "compat_anthropic";
  const spec = buildExecutionSpec({
    userId: args.userId,
    threadId: thread.id,
    definition: getSubagentDefinition(SPEC_SUBAGENT, args.config),
    allowedSubagents: subagentNames(args.config),
    model: specModel(args.config, args.firstModel),
    origin: { kind: "api" },
    kind,
  });
  const { written } = await writeBatch(tx, {
    userId: args.userId,
    threadId: thread.id,
    submissionKey: `compat:${thread.id}`,
    spec,
    config: args.config,
    // What the panel and the Workers page show; the items run their own requests, not a sub-agent.
    label: `${args.api}-batch`,
    total: args.total,
    // A provider batch runs as fast as the deployment allows: the configured per-batch ceilings.
    maxLiveItems: b.max_live_items_per_batch,
    maxRunningItems: b.max_running_items_per_batch,
    // The providers' create calls carry no budget; the daily token quota still applies.
    maxTotalTokens: null,
    maxCostUsd: null,
    wakeLead: false,
    chunks: requestChunks(args.requests()),
    afterChunk: storeRequests,
  });
  const batch = await written;
  const windowSeconds = COMPLETION_WINDOW_SECONDS[args.completionWindow] ?? 24 * 3600;
  const [compat] = await tx
    .insert(compatBatches)
    .values({
      userId: args.userId,
      api: args.api,
      batchId: batch.id,
      inputFileId: args.inputFileId ?? null,
      endpoint: args.endpoint ?? null,
      completionWindow: args.completionWindow,
      metadata: storable(args.metadata ?? null),
      total: args.total,
      expiresAt: sql`now() + make_interval(secs => ${windowSeconds})`,
    })
    .returning();
  return { compat: compat!, batch };
}

/** An OpenAI batch whose input failed validation: status `failed` with `errors.data`, nothing runs. */
export async function createFailedBatch(
  tx: DbOrTx,
  args: {
    userId: string;
    inputFileId: string;
    endpoint: string;
    completionWindow: string;
    metadata?: Record<string, string> | null;
    errors: LineError[];
    total: number;
  },
): Promise<CompatBatch> {
  const [compat] = await tx
    .insert(compatBatches)
    .values({
      userId: args.userId,
      api: "openai",
      inputFileId: args.inputFileId,
      endpoint: args.endpoint,
      completionWindow: args.completionWindow,
      metadata: storable(args.metadata ?? null),
      errors: storable(args.errors),
      total: args.total,
      expiresAt: sql`now() + interval '24 hours'`,
    })
    .returning();
  return { compat: compat!, batch: null };
}

async function load(db: DbOrTx, compat: CompatBatchRow): Promise<CompatBatch> {
  if (!compat.batchId) return { compat, batch: null };
  const [batch] = await db.select().from(subagentBatches).where(eq(subagentBatches.id, compat.batchId));
  return { compat, batch: batch ?? null };
}

const ACTIVE = new Set(["queued", "running", "paused"]);

/**
 * The caller's compatible batch, as stored: a pure read (the completion window is enforced
 * before it by the explicit step in ./expiry.ts, which readers call first).
 */
export async function getCompatBatch(db: DbOrTx, args: { userId: string; api: CompatApi; id: string }): Promise<CompatBatch> {
  // One statement, so the two rows are of one snapshot (a concurrent expiry is seen whole or not at all).
  const [row] = await db
    .select({ compat: compatBatches, batch: subagentBatches })
    .from(compatBatches)
    .leftJoin(subagentBatches, eq(subagentBatches.id, compatBatches.batchId))
    .where(and(eq(compatBatches.id, args.id), eq(compatBatches.userId, args.userId), eq(compatBatches.api, args.api)));
  if (!row) throw notFound("batch");
  return { compat: row.compat, batch: row.batch };
}

/**
 * Newest first. OpenAI pages with `after` (older than that batch); Anthropic also with
 * `before_id` (newer than that batch, still returned newest first).
 */
export async function listCompatBatches(
  db: DbOrTx,
  args: { userId: string; api: CompatApi; limit: number; afterId?: string | null; beforeId?: string | null; param: string },
): Promise<{ rows: CompatBatch[]; hasMore: boolean }> {
  const c = compatBatches;
  const anchorId = args.afterId ?? args.beforeId;
  let cursor: ReturnType<typeof sql> | undefined;
  if (anchorId) {
    const [anchor] = await db
      .select({ id: c.id })
      .from(c)
      .where(and(eq(c.id, anchorId), eq(c.userId, args.userId), eq(c.api, args.api)));
    if (!anchor) throw new CompatParamError(args.param, `${args.param}: no such batch`);
    // Compared in SQL: created_at has microseconds, a JavaScript Date only milliseconds.
    const key = sql`(select created_at, id from compat_batches where id = ${anchor.id})`;
    cursor = args.afterId ? sql`(${c.createdAt}, ${c.id}) < ${key}` : sql`(${c.createdAt}, ${c.id}) > ${key}`;
  }
  // before_id walks towards newer batches: read the nearest ones first, then present newest first.
  const towardsNewer = !args.afterId && !!args.beforeId;
  const rows = await db
    .select({ compat: c, batch: subagentBatches })
    .from(c)
    .leftJoin(subagentBatches, eq(subagentBatches.id, c.batchId))
    .where(and(eq(c.userId, args.userId), eq(c.api, args.api), cursor))
    .orderBy(...(towardsNewer ? [asc(c.createdAt), asc(c.id)] : [desc(c.createdAt), desc(c.id)]))
    .limit(args.limit + 1);
  const page = rows.slice(0, args.limit);
  if (towardsNewer) page.reverse();
  return { rows: page, hasMore: rows.length > args.limit };
}

/**
 * Cancels the batch's unfinished items in one transaction (finished output is kept) and records
 * the request. Idempotent; 409 once the batch has ended otherwise.
 */
export async function cancelCompatBatch(db: Db, args: { userId: string; api: CompatApi; id: string }): Promise<CompatBatch> {
  const current = await getCompatBatch(db, args);
  const { compat, batch } = current;
  if (!batch) throw new AppError("conflict", "batch failed validation; there is nothing to cancel");
  if (compat.cancelRequestedAt || compat.expiredAt) return current;
  if (!ACTIVE.has(batch.status)) throw new AppError("conflict", `batch has already ended (${batch.status})`);
  return db.transaction(async (tx) => {
    const [marked] = await tx
      .update(compatBatches)
      // A concurrent cancel may have got here first: keep its instant.
      .set({ cancelRequestedAt: sql`coalesce(${compatBatches.cancelRequestedAt}, now())` })
      .where(eq(compatBatches.id, compat.id))
      .returning();
    try {
      await cancelBatch(tx, { userId: args.userId, threadId: batch.threadId, batchId: batch.id });
    } catch (err) {
      if (err instanceof AppError && err.code === "conflict")
        throw new AppError("conflict", "batch has already ended; there is nothing to cancel");
      throw err;
    }
    return load(tx, marked!);
  });
}

/** Anthropic delete: only an ended batch; its thread (with the durable batch and items) goes with it. */
export async function deleteCompatBatch(db: Db, args: { userId: string; api: CompatApi; id: string }): Promise<void> {
  const { compat, batch } = await getCompatBatch(db, args);
  if (batch && ACTIVE.has(batch.status))
    throw new AppError("conflict", "batch is still in progress; cancel it and wait for it to end before deleting it");
  await db.transaction(async (tx) => {
    await tx.delete(compatBatches).where(eq(compatBatches.id, compat.id));
    if (batch) await tx.execute(sql`delete from threads where id = ${batch.threadId} and user_id = ${args.userId}`);
  });
}
