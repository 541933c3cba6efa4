"use client";

import { useQuery } from "@tanstack/react-query";
import { type ReviewEntry, type ReviewPage, reviewPageSchema } from "@/lib/api/review-queue";
import { type ItemReview, itemReviewSchema } from "@/lib/api/reviews";
import { fetchJson, sendJson } from "@/lib/api/client";

/** The review queue's calls (GET /api/reviews, POST .../items/{id}/review), each checked with its lib/api schema. */

export const REVIEW_PAGE_SIZE = 20;

/** The navigation's pending count; the queue refreshes it after each decision. */
export const PENDING_REVIEWS_KEY = ["reviews", "pending"] as const;

export function fetchReviewPage(cursor: string | null, signal?: AbortSignal): Promise<ReviewPage> {
  const q = new URLSearchParams({ limit: String(REVIEW_PAGE_SIZE) });
  if (cursor) q.set("cursor", cursor);
  return fetchJson(reviewPageSchema, `/api/reviews?${q}`, "review queue", { signal });
}

export interface ReviewDecision {
  decision: "accept" | "reject";
  note?: string;
  /** A corrected answer (absent: the model's stands). */
  output?: unknown;
}

const reviewPath = (threadId: string, batchId: string, itemId: string) =>
  `/api/threads/${encodeURIComponent(threadId)}/subagent-batches/${encodeURIComponent(batchId)}/items/${encodeURIComponent(itemId)}/review`;

/** Decides at the version the person saw: a 409 ApiError when someone decided since. */
export function decideReview(entry: ReviewEntry, decision: ReviewDecision): Promise<ItemReview> {
  return sendJson(itemReviewSchema, reviewPath(entry.thread_id, entry.batch_id, entry.item_id), "review", {
    ...decision,
    version: entry.review.version,
  });
}

/** Puts a finished item in the review queue by hand (a decided one goes back, its decision kept until the next). */
export function requestReview(threadId: string, batchId: string, itemId: string): Promise<ItemReview> {
  return sendJson(itemReviewSchema, reviewPath(threadId, batchId, itemId), "review", { request: true });
}

/** How many items wait for the signed-in person's review (one small read, every half minute). */
export function usePendingReviews(): number | null {
  const { data } = useQuery({
    queryKey: PENDING_REVIEWS_KEY,
    queryFn: async ({ signal }) => (await fetchJson(reviewPageSchema, "/api/reviews?limit=1", "review count", { signal })).pending,
    refetchInterval: 30_000,
  });
  return data ?? null;
}
