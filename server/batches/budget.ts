import { and, eq, sql } from "drizzle-orm";
import type { BudgetUpdate } from "@/lib/api/batches";
import type { FlotillaConfig } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatches, userDailyTokens } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { catalogEntries, type Prices } from "@/server/models/catalog";
import { type BatchScopeArgs, getBatch } from "./owned";
import type { ModelPrice } from "./spec";
import type { BatchRow } from "./types";

/**
 * Budgets and the daily token quota. The limits live on the batch row; the loop migration's
 * BEFORE UPDATE trigger pauses the batch (pause_reason "budget" or "quota") in the very
 * transaction whose settle reaches them, and claims only take queued/running batches, so no new
 * item starts after that. Items already in flight finish: the overshoot is at most what the
 * batch's other running items (max_running_items - 1 of them) use.
 */

/** Catalog prices of the model a batch's spec names (catalog name, or the provider model id it resolved to). */
export function modelPrices(config: FlotillaConfig, modelName: string): ModelPrice {
  const entries = catalogEntries(config);
  const entry = entries.find((e) => e.name === modelName) ?? entries.find((e) => e.model === modelName);
  return {
    input: entry?.pricePerMillionInput ?? 0,
    output: entry?.pricePerMillionOutput ?? 0,
    cached_input: entry?.pricePerMillionCachedInput ?? 0,
    cache_write: entry?.pricePerMillionCacheWrite ?? 0,
    ...(entry?.batchDiscount !== undefined ? { batch_discount: entry.batchDiscount } : {}),
  };
}

/** A frozen price snapshot as costUsd takes it (cache prices missing in older specs: the input price). */
export function snapshotPrices(p: ModelPrice): Prices {
  return {
    pricePerMillionInput: p.input,
    pricePerMillionOutput: p.output,
    pricePerMillionCachedInput: p.cached_input ?? p.input,
    pricePerMillionCacheWrite: p.cache_write ?? p.input,
  };
}

export function usedTokens(b: Pick<BatchRow, "inputTokens" | "outputTokens">): number {
  return Number(b.inputTokens) + Number(b.outputTokens);
}

/** US dollars the batch spent: its items' cost_usd (each model's tokens at its own price snapshot), kept by the counters trigger. */
export function usedCostUsd(b: Pick<BatchRow, "costUsd">): number {
  return Math.max(0, Number(b.costUsd) || 0);
}

/** True when the batch's usage is at or over one of its limits (the trigger's condition). */
export function budgetReached(b: BatchRow): boolean {
  return (
    (b.maxTotalTokens !== null && usedTokens(b) >= Number(b.maxTotalTokens)) ||
    (b.maxCostUsd !== null && usedCostUsd(b) >= b.maxCostUsd)
  );
}

const fmtUsd = (n: number) => `$${n.toFixed(n < 1 ? 6 : 2)}`;

/** Tokens the user spent today (UTC), from the per-day counter. */
export async function tokensUsedToday(db: DbOrTx, userId: string): Promise<number> {
  const [row] = await db
    .select({ tokens: userDailyTokens.tokens })
    .from(userDailyTokens)
    .where(and(eq(userDailyTokens.userId, userId), eq(userDailyTokens.day, sql`(now() at time zone 'utc')::date`)));
  return Number(row?.tokens ?? 0);
}

/** 429 quota_exceeded when quotas.max_tokens_per_day is set and the user reached it today. */
export async function assertDailyTokenQuota(db: DbOrTx, config: FlotillaConfig, userId: string): Promise<void> {
  const quota = config.quotas.max_tokens_per_day;
  if (quota <= 0) return;
  const used = await tokensUsedToday(db, userId);
  if (used >= quota)
    throw new AppError(
      "quota_exceeded",
      `daily token quota reached: ${used} of ${quota} tokens used today (quotas.max_tokens_per_day); it resets at 00:00 UTC`,
    );
}

/**
 * Refuses to resume a batch that would pause again at once: over its budget (raise it first
 * with POST .../budget) or, when paused at the quota, while today's usage is still over it.
 */
export async function assertResumable(tx: DbOrTx, batch: BatchRow): Promise<void> {
  if (budgetReached(batch)) {
    const parts: string[] = [];
    if (batch.maxTotalTokens !== null) parts.push(`${usedTokens(batch)} of max_total_tokens ${batch.maxTotalTokens} used`);
    if (batch.maxCostUsd !== null) parts.push(`${fmtUsd(usedCostUsd(batch))} of max_cost_usd ${fmtUsd(batch.maxCostUsd)} used`);
    throw new AppError(
      "conflict",
      `batch is paused at its budget (${parts.join("; ")}); raise it with POST .../budget before resuming`,
    );
  }
  if (batch.pauseReason === "quota" && batch.dailyTokenQuota > 0) {
    const used = await tokensUsedToday(tx, batch.userId);
    if (used >= batch.dailyTokenQuota)
      throw new AppError(
        "conflict",
        `batch is paused at the daily token quota (${used} of ${batch.dailyTokenQuota} tokens used today); it can resume after 00:00 UTC`,
      );
  }
}

/**
 * Sets new limits (null removes one). A limit below what the batch already used is a 400 that
 * names the field and the usage; the batch stays paused — resume it afterwards.
 */
export async function updateBudget(db: DbOrTx, args: BatchScopeArgs & { update: BudgetUpdate }): Promise<BatchRow> {
  await getBatch(db, args);
  return db.transaction(async (tx) => {
    const [batch] = await tx.select().from(subagentBatches).where(eq(subagentBatches.id, args.batchId)).for("update");
    if (!batch) throw new AppError("not_found", "batch not found");
    if (["completed", "failed", "cancelled"].includes(batch.status))
      throw new AppError("conflict", `batch is ${batch.status}; its budget can no longer change`);
    const { max_total_tokens: tokens, max_cost_usd: cost } = args.update;
    if (tokens !== undefined && tokens !== null && tokens < usedTokens(batch))
      throw new AppError(
        "validation_failed",
        `max_total_tokens: must be at least the ${usedTokens(batch)} tokens this batch already used`,
      );
    if (cost !== undefined && cost !== null && cost < usedCostUsd(batch))
      throw new AppError(
        "validation_failed",
        `max_cost_usd: must be at least the ${fmtUsd(usedCostUsd(batch))} this batch already used`,
      );
    const [row] = await tx
      .update(subagentBatches)
      .set({
        ...(tokens !== undefined ? { maxTotalTokens: tokens } : {}),
        ...(cost !== undefined ? { maxCostUsd: cost } : {}),
        updatedAt: sql`now()`,
      })
      .where(eq(subagentBatches.id, batch.id))
      .returning();
    return row!;
  });
}
