import type { BatchProjection } from "@/lib/api/batches";

/** Rate, elapsed time and ETA of a batch from the panel's own polls (no extra requests). */

export interface RateSample {
  at: number;
  /** items executed to an end (succeeded + failed) at that moment */
  done: number;
}

export const RATE_WINDOW_MS = 30_000;

/** Items that actually ran to an end; cancelled ones are not throughput. */
export function executedCount(batch: BatchProjection): number {
  return batch.counts.succeeded + batch.counts.failed;
}

/** Appends a poll sample and drops those older than the window (keeping one anchor before it). */
export function pushSample(samples: RateSample[], sample: RateSample, windowMs = RATE_WINDOW_MS): RateSample[] {
  const last = samples[samples.length - 1];
  // A retry can lower the count; restart the window rather than report a negative rate.
  if (last && sample.done < last.done) return [sample];
  const next = [...samples, sample];
  while (next.length > 2 && next[1].at <= sample.at - windowMs) next.shift();
  return next;
}

function parseTime(s: string | null): number | null {
  if (!s) return null;
  const t = Date.parse(s);
  return Number.isFinite(t) ? t : null;
}

export interface BatchTiming {
  elapsedMs: number;
  /** items executed per second, or null when unknown */
  rate: number | null;
  /** remaining time while running, or null */
  etaMs: number | null;
}

/**
 * Elapsed runs from start (or creation) to finish (or now). The rate counts executed items
 * (not cancelled ones), prefers recent samples (at least 3 s of them) and falls back to the
 * whole-run average; the ETA exists only while running with a positive rate.
 */
export function batchTiming(batch: BatchProjection, now: number, samples: RateSample[] = []): BatchTiming {
  const start = parseTime(batch.started_at) ?? parseTime(batch.created_at) ?? now;
  const end = parseTime(batch.finished_at) ?? now;
  const elapsedMs = Math.max(0, end - start);
  const done = executedCount(batch);
  let rate: number | null = null;
  const first = samples[0];
  const last = samples[samples.length - 1];
  if (first && last && last.at - first.at >= 3_000 && batch.status === "running") {
    rate = (last.done - first.done) / ((last.at - first.at) / 1000);
  } else if (elapsedMs >= 1_000 && done > 0) {
    rate = done / (elapsedMs / 1000);
  }
  if (rate !== null && (!Number.isFinite(rate) || rate < 0)) rate = null;
  const remaining = Math.max(0, batch.total - batch.terminal);
  const etaMs = batch.status === "running" && rate && rate > 0 ? (remaining / rate) * 1000 : null;
  return { elapsedMs, rate, etaMs };
}
