import {
  type BatchProjection,
  batchProjectionSchema,
  clampProgress,
  type ItemProjection,
  itemProjectionSchema,
  type ItemPage,
} from "@/lib/api/batches";
import { ITEM_INPUT_MAX_CHARS, ITEM_PREVIEW_MAX_CHARS } from "./repository";
import type { BatchRow, ItemPageResult, ItemSummary } from "./types";

/**
 * Rows → the public API shapes of lib/api/batches.ts. Explicit field by field: the execution
 * spec, submission key, owner, prompts, lease internals and full results never leave here.
 */

const iso = (d: Date | null | undefined): string | null => (d ? d.toISOString() : null);
const count = (n: number | null | undefined): number => (Number.isFinite(n) && (n as number) > 0 ? (n as number) : 0);

export function toBatchProjection(b: BatchRow): BatchProjection {
  const counts = {
    pending: count(b.pendingCount),
    queued: count(b.queuedCount),
    leased: count(b.leasedCount),
    running: count(b.runningCount),
    succeeded: count(b.succeededCount),
    failed: count(b.failedCount),
    cancelled: count(b.cancelledCount),
  };
  const terminal = counts.succeeded + counts.failed + counts.cancelled;
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
    usage: { input_tokens: count(Number(b.inputTokens)), output_tokens: count(Number(b.outputTokens)) },
    created_at: b.createdAt.toISOString(),
    updated_at: b.updatedAt.toISOString(),
    started_at: iso(b.startedAt),
    finished_at: iso(b.finishedAt),
  };
}

function bound(text: string | null, max: number): string | null {
  if (text === null) return null;
  return text.length > max ? text.slice(0, max) : text;
}

export function toItemProjection(i: ItemSummary, previewMaxChars = ITEM_PREVIEW_MAX_CHARS): ItemProjection {
  return {
    id: i.id,
    item_key: i.itemKey,
    input: bound(i.input, ITEM_INPUT_MAX_CHARS) ?? "",
    position: i.position,
    status: i.status,
    attempts: i.attempts,
    preview: bound(i.preview, previewMaxChars),
    error: bound(i.error, previewMaxChars),
    usage: { input_tokens: count(Number(i.inputTokens)), output_tokens: count(Number(i.outputTokens)) },
    started_at: iso(i.startedAt),
    finished_at: iso(i.finishedAt),
  };
}

export function toItemPage(page: ItemPageResult): ItemPage {
  return { items: page.items.map((i) => toItemProjection(i)), next_cursor: page.nextCursor };
}

/** Schemas re-exported for callers that validate what they send. */
export { batchProjectionSchema, itemProjectionSchema };
