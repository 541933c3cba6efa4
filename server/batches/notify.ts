import type { BatchEvent } from "@/lib/api/batch-controls";

/**
 * LISTEN/NOTIFY channel that wakes workers early: new work (submit, resume, retry) and cancels.
 * Notifications are only a latency optimisation; workers poll regardless, so a lost one costs
 * at most one poll interval.
 */
export const BATCH_CHANNEL = "flotilla_batches";

export type { BatchEvent };

export function batchEventPayload(event: BatchEvent, batchId: string): string {
  return `${event}:${batchId}`;
}

export function parseBatchEvent(payload: string): { event: BatchEvent; batchId: string } | undefined {
  const [event, batchId] = payload.split(":");
  if (!batchId || !["submit", "resume", "retry", "cancel"].includes(event ?? "")) return undefined;
  return { event: event as BatchEvent, batchId };
}
