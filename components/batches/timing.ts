import type { BatchProjection } from "@/lib/api/batches";

/**
 * A batch's elapsed time, from its projection (no extra requests); its throughput and ETA are
 * the server's (`eta`, server/batches/waiting.ts). A batch that a retry reopened counts from the
 * retry: the time it sat finished before is not time it ran.
 */
export interface BatchElapsed {
  elapsedMs: number;
  /** Counted from the retry that reopened the batch (`reopened_at`), not from its first start. */
  sinceRetry: boolean;
}

function parseTime(s: string | null): number | null {
  if (!s) return null;
  const t = Date.parse(s);
  return Number.isFinite(t) ? t : null;
}

/** From the retry that reopened it, else its start (or creation), to its finish (or now). */
export function batchElapsed(batch: BatchProjection, now: number): BatchElapsed {
  const reopened = parseTime(batch.reopened_at);
  const start = reopened ?? parseTime(batch.started_at) ?? parseTime(batch.created_at) ?? now;
  const end = parseTime(batch.finished_at) ?? now;
  return { elapsedMs: Math.max(0, end - start), sinceRetry: reopened !== null };
}
