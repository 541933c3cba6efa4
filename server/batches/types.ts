import type { subagentBatches } from "@/server/db/schema";
import type { ItemStatus } from "@/server/db/schema/batches";

export type BatchRow = typeof subagentBatches.$inferSelect;

/** The columns an item page needs: never the prompt or the full result. Preview and error arrive bounded. */
export interface ItemSummary {
  id: string;
  batchId: string;
  itemKey: string;
  /** What the owner submitted for the item, cut to ITEM_INPUT_MAX_CHARS. */
  input: string;
  position: number;
  status: ItemStatus;
  attempts: number;
  preview: string | null;
  error: string | null;
  inputTokens: number;
  outputTokens: number;
  /** Of the input, read from / written to the provider's prompt cache. */
  cachedInputTokens: number;
  cacheWriteTokens: number;
  /** Usage at the batch's price snapshot (US dollars). */
  costUsd: number;
  /** Tool calls of the item's latest run (0 before one finished). */
  toolCalls: number;
  /**
   * The parsed answer, read only when its stored text could fit the preview cap (null otherwise);
   * the projection drops one whose compact JSON is still longer.
   */
  output: unknown;
  /** The item's expected value and a person's corrected answer, read like `output` (null: none, or too long). */
  expected: unknown;
  reviewedOutput: unknown;
  checks: { name: string; passed: boolean; score?: number; reason?: string }[] | null;
  verdict: "passed" | "failed" | null;
  reviewState: "pending" | "accepted" | "rejected" | null;
  reviewNote: string | null;
  corrected: boolean;
  reviewedAt: Date | null;
  reviewVersion: number;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export interface ItemPageResult {
  items: ItemSummary[];
  /** Opaque; null on the last page. */
  nextCursor: string | null;
}

/** An item a worker holds: identity, prompt and the fencing token every later write must carry. */
export interface ClaimedItem {
  id: string;
  batchId: string;
  itemKey: string;
  position: number;
  prompt: string;
  leaseToken: number;
  /** Attempt number of this lease (1-based). */
  attempt: number;
  /** Object items: what the checks compare against (null when the item has none). */
  expected: unknown;
  /** The error of the attempt a `retry` check failed (`check_failed: <name>: <reason>`), else null. */
  feedback: string | null;
  /** The item has stored steps (steps.ts): this attempt continues from them instead of starting over. */
  resume: boolean;
  /** The item's run from its start (DESIGN "Durable steps"): part of its tool calls' idempotency keys. */
  generation: number;
}

export interface LeaseRef {
  id: string;
  leaseToken: number;
}
