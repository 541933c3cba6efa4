import type { AnthropicBatch, OpenAiBatch, OpenAiFile } from "@/lib/api/compat";
import type { CompatBatch } from "./batches";
import type { FileRow } from "./files";
import { anthropicBatchId, errorFileId, fileId, openAiBatchId, outputFileId } from "./ids";

/** Rows → the providers' objects (lib/api/compat.ts), field by field. */

const unix = (d: Date) => Math.floor(d.getTime() / 1000);
const unixOrNull = (d: Date | null | undefined) => (d ? unix(d) : null);
const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);
const ACTIVE = new Set(["queued", "running", "paused"]);

export function toOpenAiFile(f: FileRow): OpenAiFile {
  return {
    id: fileId(f.id),
    object: "file",
    bytes: f.bytes,
    created_at: unix(f.createdAt),
    filename: f.filename,
    purpose: "batch",
    status: "processed",
    expires_at: null,
    status_details: null,
  };
}

export function toVirtualFile(current: CompatBatch, kind: "output" | "errors", bytes: number): OpenAiFile {
  const id = current.compat.id;
  return {
    id: kind === "output" ? outputFileId(id) : errorFileId(id),
    object: "file",
    bytes,
    created_at: unix(current.batch?.finishedAt ?? current.compat.createdAt),
    filename: `${openAiBatchId(id)}_${kind === "output" ? "output" : "error"}.jsonl`,
    purpose: "batch_output",
    status: "processed",
    expires_at: null,
    status_details: null,
  };
}

/** Whether a result file of the batch exists yet: the provider publishes them when the batch ends. */
export function resultFileReady(current: CompatBatch, kind: "output" | "errors"): boolean {
  const b = current.batch;
  if (!b || ACTIVE.has(b.status)) return false;
  return kind === "output" ? b.succeededCount > 0 : b.failedCount + b.cancelledCount > 0;
}

/** `cancelling`: the answer of the cancel call itself (the provider reports the request first). */
export function toOpenAiBatch(current: CompatBatch, options: { cancelling?: boolean } = {}): OpenAiBatch {
  const { compat, batch: b } = current;
  const created = unix(compat.createdAt);
  let status: OpenAiBatch["status"];
  if (!b) status = "failed";
  else if (options.cancelling) status = "cancelling";
  else if (compat.expiredAt) status = "expired";
  else if (ACTIVE.has(b.status)) status = compat.cancelRequestedAt ? "cancelling" : "in_progress";
  else if (b.status === "cancelled") status = "cancelled";
  else status = "completed";
  const ended = status === "completed" || status === "cancelled" || status === "expired";
  const input = Number(b?.inputTokens ?? 0);
  const output = Number(b?.outputTokens ?? 0);
  return {
    id: openAiBatchId(compat.id),
    object: "batch",
    endpoint: compat.endpoint ?? "/v1/chat/completions",
    errors: compat.errors ? { object: "list", data: compat.errors } : null,
    input_file_id: compat.inputFileId ? fileId(compat.inputFileId) : "",
    completion_window: compat.completionWindow,
    status,
    output_file_id: ended && resultFileReady(current, "output") ? outputFileId(compat.id) : null,
    error_file_id: ended && resultFileReady(current, "errors") ? errorFileId(compat.id) : null,
    created_at: created,
    in_progress_at: b ? created : null,
    expires_at: unix(compat.expiresAt),
    finalizing_at: status === "completed" ? unixOrNull(b?.finishedAt) : null,
    completed_at: status === "completed" ? unixOrNull(b?.finishedAt) : null,
    failed_at: status === "failed" ? created : null,
    expired_at: unixOrNull(compat.expiredAt),
    cancelling_at: unixOrNull(compat.cancelRequestedAt),
    cancelled_at: status === "cancelled" ? unixOrNull(b?.finishedAt) : null,
    request_counts: { total: compat.total, completed: b?.succeededCount ?? 0, failed: b?.failedCount ?? 0 },
    usage: {
      input_tokens: input,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: output,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: input + output,
    },
    metadata: compat.metadata ?? null,
  };
}

/** `origin`: this deployment as the client reached it, for `results_url`. */
export function toAnthropicBatch(current: CompatBatch, origin: string, options: { canceling?: boolean } = {}): AnthropicBatch {
  const { compat, batch: b } = current;
  const id = anthropicBatchId(compat.id);
  const active = !!b && ACTIVE.has(b.status);
  const ended = !active && !options.canceling;
  const expired = compat.expiredAt !== null;
  const cancelled = b?.cancelledCount ?? 0;
  return {
    id,
    type: "message_batch",
    processing_status: ended ? "ended" : options.canceling || compat.cancelRequestedAt ? "canceling" : "in_progress",
    request_counts: {
      processing: b ? b.pendingCount + b.queuedCount + b.leasedCount + b.runningCount : 0,
      succeeded: b?.succeededCount ?? 0,
      errored: b?.failedCount ?? 0,
      canceled: expired ? 0 : cancelled,
      expired: expired ? cancelled : 0,
    },
    ended_at: ended ? iso(b?.finishedAt ?? compat.expiredAt ?? compat.createdAt) : null,
    created_at: compat.createdAt.toISOString(),
    expires_at: compat.expiresAt.toISOString(),
    archived_at: null,
    cancel_initiated_at: iso(compat.cancelRequestedAt),
    results_url: ended ? `${origin}/v1/messages/batches/${id}/results` : null,
  };
}
