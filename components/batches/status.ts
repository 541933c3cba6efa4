import { type BatchProjection, type BatchStatus, clampProgress } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";

/** A batch's and an item's states in words, and which controls each state allows. No React, no fetch. */

const ACTIVE: ReadonlySet<BatchStatus> = new Set(["queued", "running", "paused"]);

/** A batch that may still change by itself (so the panel keeps polling it). */
export function isActiveBatch(status: BatchStatus): boolean {
  return ACTIVE.has(status);
}

/** The controls' rules (which status allows which control, what follows) are the one table's. */
export { allowedControls, canRetryItem, optimisticStatus } from "@/lib/api/batch-controls";

/** The outcome counts of a batch that its status words depend on. */
export interface OutcomeCounts {
  succeeded: number;
  failed: number;
  cancelled: number;
}

export type StatusTone = "active" | "paused" | "ok" | "warn" | "bad" | "neutral";

/**
 * The status of a batch in words: a batch that completed with failed or cancelled items says
 * so ("completed · 2 failed") in amber instead of a green "completed".
 */
export function batchStatusText(status: BatchStatus, counts: OutcomeCounts): { label: string; tone: StatusTone } {
  if (status === "completed") {
    const extra = [
      counts.failed ? `${formatCount(counts.failed)} failed` : "",
      counts.cancelled ? `${formatCount(counts.cancelled)} cancelled` : "",
    ].filter(Boolean);
    return extra.length ? { label: `completed · ${extra.join(" · ")}`, tone: "warn" } : { label: "completed", tone: "ok" };
  }
  if (status === "failed") return { label: "failed", tone: "bad" };
  if (status === "cancelled") return { label: "cancelled", tone: "neutral" };
  if (status === "paused") return { label: "paused", tone: "paused" };
  return { label: status, tone: "active" };
}

/** Progress as people read it: "3 / 5 done · 2 failed · 1 cancelled" (finished items of the total, then the split). */
export function progressSplit(total: number, counts: OutcomeCounts): string {
  const parts = [`${formatCount(counts.succeeded)} / ${formatCount(total)} done`];
  if (counts.failed) parts.push(`${formatCount(counts.failed)} failed`);
  if (counts.cancelled) parts.push(`${formatCount(counts.cancelled)} cancelled`);
  return parts.join(" · ");
}

export { ITEM_STATES } from "@/lib/item-states";

/**
 * What the progress bar shows: the finished share, except for a cancelled batch, whose
 * cancelled items never ran: its bar shows the share that ran (done + failed), not a full bar.
 */
export function barProgress(batch: Pick<BatchProjection, "status" | "total" | "terminal" | "counts">): number {
  if (batch.status === "cancelled") return clampProgress(batch.counts.succeeded + batch.counts.failed, batch.total);
  return clampProgress(batch.terminal, batch.total);
}
