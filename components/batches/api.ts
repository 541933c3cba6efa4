import {
  type BatchEstimate,
  batchEstimateSchema,
  type BatchProjection,
  batchListSchema,
  batchRetryResponseSchema,
  batchNotificationsSchema,
  batchProjectionSchema,
  type Features,
  featuresSchema,
  type ItemDetail,
  type ItemPage,
  type ItemRetryResponse,
  type ItemStatus,
  itemDetailSchema,
  itemPageSchema,
  itemRetryResponseSchema,
  settlementsSeenSchema,
} from "@/lib/api/batches";
import {
  batchApprovalsResultSchema,
  type WaitingApproval,
  type WaitingTool,
  waitingApprovalsSchema,
} from "@/lib/api/approvals";
import type { Verdict } from "@/lib/api/batch-data";
import { threadMessagesSchema } from "@/lib/api/chat";
import { fetchJson, sendJson } from "@/lib/api/client";
import type { BatchSubmission } from "@/lib/api/files";
import type { ChatMessage } from "@/lib/api/chat";
import { type VariantDraft, type VariantRequest, variantDraftSchema } from "@/lib/api/variants";

/** The batch panel's calls, each through lib/api/client with its lib/api projection schema. */

export const ITEM_PAGE_SIZE = 50;

const base = (threadId: string) => `/api/threads/${encodeURIComponent(threadId)}/subagent-batches`;
const batchPath = (threadId: string, batchId: string) => `${base(threadId)}/${encodeURIComponent(batchId)}`;
const itemPath = (threadId: string, batchId: string, itemId: string) =>
  `${batchPath(threadId, batchId)}/items/${encodeURIComponent(itemId)}`;

export function fetchFeatures(signal?: AbortSignal): Promise<Features> {
  return fetchJson(featuresSchema, "/api/features", "feature list", { signal });
}

export async function fetchBatches(threadId: string, signal?: AbortSignal): Promise<BatchProjection[]> {
  return (await fetchJson(batchListSchema, base(threadId), "batch list", { signal })).batches;
}

export function fetchBatch(threadId: string, batchId: string, signal?: AbortSignal): Promise<BatchProjection> {
  return fetchJson(batchProjectionSchema, batchPath(threadId, batchId), "batch", { signal });
}

/** The server-side filters of an items page (`?status=&verdict=&check=&check_result=&q=`). */
export interface ItemFilter {
  status?: ItemStatus | null;
  verdict?: Verdict | null;
  /** `<check name>:passed` or `<check name>:failed` (a check name holds no colon). */
  check?: string | null;
  q?: string | null;
}

export function fetchItems(
  threadId: string,
  batchId: string,
  opts: ItemFilter & { cursor?: string | null; limit?: number },
  signal?: AbortSignal,
): Promise<ItemPage> {
  const q = new URLSearchParams();
  if (opts.status) q.set("status", opts.status);
  if (opts.verdict) q.set("verdict", opts.verdict);
  if (opts.check) {
    const at = opts.check.lastIndexOf(":");
    q.set("check", opts.check.slice(0, at));
    q.set("check_result", opts.check.slice(at + 1));
  }
  if (opts.q) q.set("q", opts.q);
  if (opts.cursor) q.set("cursor", opts.cursor);
  q.set("limit", String(opts.limit ?? ITEM_PAGE_SIZE));
  return fetchJson(itemPageSchema, `${batchPath(threadId, batchId)}/items?${q}`, "item page", { signal });
}

/** One item with the tool calls of its latest run. */
export function fetchItemDetail(threadId: string, batchId: string, itemId: string, signal?: AbortSignal): Promise<ItemDetail> {
  return fetchJson(itemDetailSchema, itemPath(threadId, batchId, itemId), "item", { signal });
}

export type ApprovalDecision = "approve" | "deny";
export type { BatchAction } from "@/lib/api/batch-controls";
import type { BatchAction } from "@/lib/api/batch-controls";

export function controlBatch(threadId: string, batchId: string, action: BatchAction): Promise<BatchProjection> {
  return sendJson(batchProjectionSchema, `${batchPath(threadId, batchId)}/${action}`, "batch");
}

/** Retries one item; with `input`, a corrected one (checked like a submission item: a 400 names the field). */
export function retryItem(threadId: string, batchId: string, itemId: string, input?: unknown): Promise<ItemRetryResponse> {
  return sendJson(itemRetryResponseSchema, `${itemPath(threadId, batchId, itemId)}/retry`, "retried item", input === undefined ? undefined : { input });
}

/** What the draft would cost (writes nothing; a 400 is the submission's own refusal). */
export function estimateBatch(threadId: string, input: BatchSubmission, signal?: AbortSignal): Promise<BatchEstimate> {
  return sendJson(batchEstimateSchema, `${base(threadId)}/estimate`, "estimate", input, { signal });
}

export function submitBatch(threadId: string, input: BatchSubmission): Promise<BatchProjection> {
  return sendJson(batchProjectionSchema, base(threadId), "batch", input);
}

/** The settings a variant of the batch starts from (the New batch dialog's prefill) and the catalog's model names. */
export function fetchVariantDraft(threadId: string, batchId: string, signal?: AbortSignal): Promise<VariantDraft> {
  return fetchJson(variantDraftSchema, `${batchPath(threadId, batchId)}/variant`, "variant settings", { signal });
}

/** The batch's items run again with what the request changes (a 400 names the field, as a submission's). */
export function submitVariant(threadId: string, batchId: string, request: VariantRequest): Promise<BatchProjection> {
  return sendJson(batchProjectionSchema, `${batchPath(threadId, batchId)}/variant`, "batch", request);
}

/** The page comparing batch a (of this thread) with b, item by item. */
export function comparePagePath(threadId: string, a: string, b: string): string {
  return `/threads/${encodeURIComponent(threadId)}/batches/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`;
}

export function updateBudget(
  threadId: string,
  batchId: string,
  budget: { max_total_tokens?: number | null; max_cost_usd?: number | null },
): Promise<BatchProjection> {
  return sendJson(batchProjectionSchema, `${batchPath(threadId, batchId)}/budget`, "batch", budget);
}

/** A batch's results as a file (streamed by the server: every matching row, whatever is loaded here). */
export function resultsUrl(threadId: string, batchId: string, format: "csv" | "jsonl"): string {
  return `${batchPath(threadId, batchId)}/results.${format}`;
}

/** The name the server gives a results file (the link's `download` says the same). */
export function resultsFileName(batchId: string, format: "csv" | "jsonl"): string {
  return `batch-${batchId}-results.${format}`;
}

/** Re-queues every failed item, or every finished item whose checks failed; answers how many. */
export function retryBatchItems(threadId: string, batchId: string, which: "failed" | "failed_checks"): Promise<{ retried: number }> {
  const filter = which === "failed" ? { status: ["failed"] } : { verdict: "failed" };
  return sendJson(batchRetryResponseSchema, `${batchPath(threadId, batchId)}/retry`, "retried items", filter);
}

export function fetchNotifications(signal?: AbortSignal) {
  return fetchJson(batchNotificationsSchema, "/api/batch-notifications", "batch notifications", { signal });
}

export function markSettlementsSeen(threadId: string) {
  return sendJson(settlementsSeenSchema, `${base(threadId)}/seen`, "seen settlements");
}

/** The thread's stored messages (the chat polls them for a lead wake-up reply). */
export async function fetchThreadMessages(threadId: string, signal?: AbortSignal): Promise<ChatMessage[]> {
  const thread = await fetchJson(threadMessagesSchema, `/api/threads/${encodeURIComponent(threadId)}`, "thread", { signal });
  return thread.messages as unknown as ChatMessage[];
}

/** The waiting calls (at most 100) and how many wait per tool (all of them). */
export function fetchWaitingApprovals(
  threadId: string,
  batchId: string,
  signal?: AbortSignal,
): Promise<{ approvals: WaitingApproval[]; tools: WaitingTool[] }> {
  return fetchJson(waitingApprovalsSchema, `${batchPath(threadId, batchId)}/approvals`, "approvals", { signal });
}

export function decideItemApproval(threadId: string, batchId: string, itemId: string, decision: ApprovalDecision) {
  return sendJson(itemRetryResponseSchema, `${itemPath(threadId, batchId, itemId)}/approval`, "approval", { decision });
}

/** Approves every waiting call of `tool`, if `seen` (the count the person was shown) still wait; else a 409 error. */
export function approveAllForTool(threadId: string, batchId: string, tool: string, seen: number): Promise<{ decided: number }> {
  return sendJson(batchApprovalsResultSchema, `${batchPath(threadId, batchId)}/approvals`, "approvals", {
    tool,
    decision: "approve",
    seen,
  });
}
