import {
  type BatchProjection,
  batchProjectionSchema,
  clampProgress,
  type ItemProjection,
  itemProjectionSchema,
  type ItemPage,
  type ProviderBatchView,
} from "@/lib/api/batches";
import { asc, eq, inArray } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatchCheckCounts, subagentBatches } from "@/server/db/schema";
import { usedCostUsd, usedTokens } from "./budget";
import { toReview } from "./review-columns";
import { loadReviewFigures, type ReviewFigures } from "./reviews";
import { specColumns } from "./spec";
import { batchTitle } from "./title";
import { DEFAULT_PREVIEW_MAX_CHARS, ITEM_INPUT_MAX_CHARS } from "./repository";
import type { BatchRow, ItemPageResult, ItemSummary } from "./types";
import { type LiveState, loadLiveStates } from "./waiting";
import { loadProviderBatchViews } from "./provider-lane/views";

/**
 * Rows → the public API shapes of lib/api/batches.ts. Explicit field by field: the execution
 * spec, submission key, owner, prompts, lease internals and full results never leave here.
 */

const iso = (d: Date | null | undefined): string | null => (d ? d.toISOString() : null);
const count = (n: number | null | undefined): number => (Number.isFinite(n) && (n as number) > 0 ? (n as number) : 0);

/** The usage object of a batch or an item row (counts arrive as bigint text or numbers). */
function usageOf(r: { inputTokens: unknown; outputTokens: unknown; cachedInputTokens: unknown; cacheWriteTokens: unknown }) {
  return {
    input_tokens: count(Number(r.inputTokens)),
    output_tokens: count(Number(r.outputTokens)),
    cached_input_tokens: count(Number(r.cachedInputTokens)),
    cache_write_tokens: count(Number(r.cacheWriteTokens)),
  };
}

/** The catalog name a batch's spec runs its items on. */
function batchModel(b: Pick<BatchRow, "executionSpec">): string {
  const model = (b.executionSpec as { model?: { name?: unknown } }).model?.name;
  return typeof model === "string" ? model : "simulator";
}

/** The golden set a batch ran on, as its spec records it. */
function goldenSetOf(b: Pick<BatchRow, "executionSpec">): { id: string; version: number } | null {
  const g = (b.executionSpec as { golden_set?: { id?: unknown; version?: unknown } | null }).golden_set;
  return g && typeof g.id === "string" && typeof g.version === "number" ? { id: g.id, version: g.version } : null;
}

export type CheckCount = { name: string; passed: number; failed: number };

/**
 * Without `live` (the tool's compact view, tests), waiting_reason comes from the row alone
 * (paused or at its budget) and there is no ETA; projectBatches supplies the live state and
 * the per-check counts (without them every check reads zero).
 */
export function toBatchProjection(
  b: BatchRow,
  live?: LiveState,
  checkCounts?: readonly CheckCount[],
  reviews?: ReviewFigures,
  providerBatches: readonly ProviderBatchView[] = [],
  variantOfTitle: string | null = null,
): BatchProjection {
  // Judges and the golden set's check: how often their pass matches the person's accept.
  const judges = new Set(
    (b.executionSpec as { checks?: { name: string; type: string }[] }).checks?.filter((c) => c.type === "judge" || c.type === "golden").map((c) => c.name),
  );
  const counts = {
    pending: count(b.pendingCount),
    queued: count(b.queuedCount),
    leased: count(b.leasedCount),
    running: count(b.runningCount),
    awaiting_approval: count(b.awaitingApprovalCount),
    succeeded: count(b.succeededCount),
    failed: count(b.failedCount),
    cancelled: count(b.cancelledCount),
  };
  const terminal = counts.succeeded + counts.failed + counts.cancelled;
  const model = batchModel(b);
  const columns = specColumns(b);
  return {
    id: b.id,
    thread_id: b.threadId,
    status: b.status,
    subagent: b.subagent,
    total: count(b.total),
    counts,
    live: counts.queued + counts.leased + counts.running,
    terminal,
    progress: clampProgress(terminal, b.total),
    max_live_items: b.maxLiveItems,
    max_running_items: b.maxRunningItems,
    max_attempts: b.maxAttempts,
    usage: usageOf(b),
    model,
    cost_usd: usedCostUsd(b),
    budget: {
      max_total_tokens: b.maxTotalTokens === null ? null : Number(b.maxTotalTokens),
      max_cost_usd: b.maxCostUsd,
      used_tokens: usedTokens(b),
      used_cost_usd: usedCostUsd(b),
    },
    pause_reason: b.status === "paused" ? (b.pauseReason ?? "user") : null,
    pilot: b.pilot,
    waiting_reason:
      live?.waitingReason ??
      (b.status === "paused" ? (b.pauseReason === "budget" || b.pauseReason === "quota" ? "budget" : "paused") : null),
    waiting_until: iso(live?.waitingUntil),
    waiting_since: iso(live?.waitingSince),
    eta: live?.eta ?? null,
    worker_slots: live?.workerSlots ?? null,
    checks: columns.checks.map((name) => {
      const c = checkCounts?.find((x) => x.name === name);
      const agreement = judges.has(name) ? { agreement: reviews?.agreement.get(name) ?? null } : {};
      return { name, passed: count(c?.passed), failed: count(c?.failed), ...agreement };
    }),
    verdicts: { passed: count(b.verdictPassedCount), failed: count(b.verdictFailedCount) },
    golden_set: goldenSetOf(b),
    input_fields: columns.inputFields,
    output_fields: columns.outputFields,
    created_at: b.createdAt.toISOString(),
    updated_at: b.updatedAt.toISOString(),
    started_at: iso(b.startedAt),
    finished_at: iso(b.finishedAt),
    reopened_at: iso(b.reopenedAt),
    variant_of: b.variantOf ?? null,
    variant_of_title: b.variantOf ? variantOfTitle : null,
    title: batchTitle(b),
    reviews: reviews?.counts ?? { pending: 0, accepted: 0, rejected: 0 },
    lane: b.lane,
    provider_batches: [...providerBatches],
  };
}

/** The per-check counts of these batches (one query; at most MAX_CHECKS rows a batch). */
export async function loadCheckCounts(db: DbOrTx, batchIds: string[]): Promise<Map<string, CheckCount[]>> {
  const byBatch = new Map<string, CheckCount[]>();
  if (batchIds.length === 0) return byBatch;
  const c = subagentBatchCheckCounts;
  const rows = await db
    .select({ batchId: c.batchId, name: c.name, passed: c.passed, failed: c.failed })
    .from(c)
    .where(batchIds.length === 1 ? eq(c.batchId, batchIds[0]!) : inArray(c.batchId, batchIds))
    .orderBy(asc(c.batchId));
  for (const { batchId, ...row } of rows) byBatch.set(batchId, [...(byBatch.get(batchId) ?? []), row]);
  return byBatch;
}

/** Projections with their live state (waiting reason, ETA) and check counts, read in a few small queries for the whole list. */
export async function projectBatches(db: DbOrTx, args: { batches: BatchRow[]; leaseSeconds: number }): Promise<BatchProjection[]> {
  const withChecks = args.batches.filter((b) => specColumns(b).checks.length > 0).map((b) => b.id);
  const live = await loadLiveStates(db, args);
  const checkCounts = await loadCheckCounts(db, withChecks);
  const reviews = await loadReviewFigures(db, args.batches.map((b) => b.id));
  const providerBatches = await loadProviderBatchViews(db, args.batches.filter((b) => b.lane === "provider_batch").map((b) => b.id));
  const originals = await loadTitles(db, args.batches);
  return args.batches.map((b) =>
    toBatchProjection(
      b,
      live.get(b.id),
      checkCounts.get(b.id),
      reviews.get(b.id),
      providerBatches.get(b.id),
      b.variantOf ? (originals.get(b.variantOf) ?? null) : null,
    ),
  );
}

/** The titles of the batches these are variants of (the same owner's: a variant is made of one's own batch). */
async function loadTitles(db: DbOrTx, batches: BatchRow[]): Promise<Map<string, string>> {
  const ids = [...new Set(batches.flatMap((b) => (b.variantOf ? [b.variantOf] : [])))];
  if (ids.length === 0) return new Map();
  const rows = await db
    .select({ id: subagentBatches.id, userId: subagentBatches.userId, executionSpec: subagentBatches.executionSpec, subagent: subagentBatches.subagent })
    .from(subagentBatches)
    .where(inArray(subagentBatches.id, ids));
  const owners = new Set(batches.map((b) => b.userId));
  return new Map(rows.filter((r) => owners.has(r.userId)).map((r) => [r.id, batchTitle(r)]));
}

export async function projectBatch(db: DbOrTx, args: { batch: BatchRow; leaseSeconds: number }): Promise<BatchProjection> {
  const [p] = await projectBatches(db, { batches: [args.batch], leaseSeconds: args.leaseSeconds });
  return p!;
}

function bound(text: string | null, max: number): string | null {
  if (text === null) return null;
  return text.length > max ? text.slice(0, max) : text;
}

/** The output when its compact JSON fits the preview cap, else null (the export carries it whole). */
function boundedOutput(output: unknown, max: number): unknown {
  if (output === null || output === undefined) return null;
  return JSON.stringify(output).length > max ? null : output;
}

/** Previews and errors arrive cut to the configured preview cap (itemSummaryColumns); the output is held to the same cap. */
export function toItemProjection(i: ItemSummary, previewMaxChars = DEFAULT_PREVIEW_MAX_CHARS): ItemProjection {
  return {
    id: i.id,
    item_key: i.itemKey,
    input: bound(i.input, ITEM_INPUT_MAX_CHARS) ?? "",
    position: i.position,
    status: i.status,
    attempts: i.attempts,
    preview: i.preview,
    error: i.error,
    usage: usageOf(i),
    cost_usd: Number.isFinite(Number(i.costUsd)) ? Math.max(0, Number(i.costUsd)) : 0,
    output: boundedOutput(i.output, previewMaxChars),
    expected: boundedOutput(i.expected, previewMaxChars),
    reviewed_output: boundedOutput(i.reviewedOutput, previewMaxChars),
    checks: (i.checks ?? []).map((c) => ({
      name: c.name,
      passed: c.passed,
      ...(typeof c.score === "number" ? { score: c.score } : {}),
      ...(typeof c.reason === "string" ? { reason: bound(c.reason, previewMaxChars)! } : {}),
    })),
    verdict: i.verdict,
    review: toReview(i),
    tool_calls: count(i.toolCalls),
    started_at: iso(i.startedAt),
    finished_at: iso(i.finishedAt),
  };
}

export function toItemPage(page: ItemPageResult, previewMaxChars?: number): ItemPage {
  return { items: page.items.map((i) => toItemProjection(i, previewMaxChars)), next_cursor: page.nextCursor };
}

/** Schemas re-exported for callers that validate what they send. */
export { batchProjectionSchema, itemProjectionSchema };
