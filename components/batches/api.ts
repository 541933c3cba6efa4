import {
  type BatchProjection,
  batchListSchema,
  batchProjectionSchema,
  type Features,
  featuresSchema,
  type ItemDetail,
  itemDetailSchema,
  type ItemPage,
  type ItemProjection,
  type ItemStatus,
  itemPageSchema,
  itemProjectionSchema,
} from "@/lib/api/batches";
import type { BatchSubmission } from "@/lib/api/files";

import { ApiError, parse, request } from "@/lib/api/client";

export { ApiError, parse, request };

/** The batch panel's calls; every response is parsed with the shared zod projection. */

export const ITEM_PAGE_SIZE = 50;

/** Mutations answer with the projection itself or wrapped as { batch } / { item }. */
function unwrap(body: unknown, key: string): unknown {
  if (body && typeof body === "object" && key in body) return (body as Record<string, unknown>)[key];
  return body;
}

const base = (threadId: string) => `/api/threads/${encodeURIComponent(threadId)}/subagent-batches`;
const batchPath = (threadId: string, batchId: string) => `${base(threadId)}/${encodeURIComponent(batchId)}`;

export async function fetchFeatures(signal?: AbortSignal): Promise<Features> {
  return parse(featuresSchema, await request("/api/features", { signal }), "feature list");
}

export async function fetchBatches(threadId: string, signal?: AbortSignal): Promise<BatchProjection[]> {
  return parse(batchListSchema, await request(base(threadId), { signal }), "batch list").batches;
}

export async function fetchItems(
  threadId: string,
  batchId: string,
  opts: { status?: ItemStatus | null; cursor?: string | null; limit?: number },
  signal?: AbortSignal,
): Promise<ItemPage> {
  const q = new URLSearchParams();
  if (opts.status) q.set("status", opts.status);
  if (opts.cursor) q.set("cursor", opts.cursor);
  q.set("limit", String(opts.limit ?? ITEM_PAGE_SIZE));
  return parse(itemPageSchema, await request(`${batchPath(threadId, batchId)}/items?${q}`, { signal }), "item page");
}

/** One item with the tool calls of its latest run. */
export async function fetchItemDetail(threadId: string, batchId: string, itemId: string, signal?: AbortSignal): Promise<ItemDetail> {
  const path = `${batchPath(threadId, batchId)}/items/${encodeURIComponent(itemId)}`;
  return parse(itemDetailSchema, await request(path, { signal }), "item");
}

const post = (path: string, body?: unknown) =>
  request(path, {
    method: "POST",
    headers: body === undefined ? undefined : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

export type { BatchAction } from "@/lib/api/batch-controls";
import type { BatchAction } from "@/lib/api/batch-controls";

export async function controlBatch(threadId: string, batchId: string, action: BatchAction): Promise<BatchProjection> {
  const body = await post(`${batchPath(threadId, batchId)}/${action}`);
  return parse(batchProjectionSchema, unwrap(body, "batch"), "batch");
}

export async function retryItem(threadId: string, batchId: string, itemId: string): Promise<ItemProjection> {
  const body = await post(`${batchPath(threadId, batchId)}/items/${encodeURIComponent(itemId)}/retry`);
  return parse(itemProjectionSchema, unwrap(body, "item"), "item");
}

export async function submitBatch(threadId: string, input: BatchSubmission): Promise<BatchProjection> {
  return parse(batchProjectionSchema, unwrap(await post(base(threadId), input), "batch"), "batch");
}

export function resultsUrl(threadId: string, batchId: string): string {
  return `${batchPath(threadId, batchId)}/results.jsonl`;
}

export async function updateBudget(
  threadId: string,
  batchId: string,
  budget: { max_total_tokens?: number | null; max_cost_usd?: number | null },
): Promise<BatchProjection> {
  return parse(batchProjectionSchema, unwrap(await post(`${batchPath(threadId, batchId)}/budget`, budget), "batch"), "batch");
}
