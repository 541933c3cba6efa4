"use client";

import { keepPreviousData, useInfiniteQuery, useQuery } from "@tanstack/react-query";
import { type CompareChange, type ComparePage, type CompareSummary, comparePageSchema, compareSummarySchema } from "@/lib/api/compare";
import { fetchJson } from "@/lib/api/client";
import { retryUnlessClientError } from "@/components/batches/panel-state";
import { ACTIVE_POLL_MS } from "@/components/batches/shared";

/** The comparison page's calls (GET .../{a}/compare/{b}, .../items, .../compare.csv), each checked with its lib/api schema. */

/**
 * Pairs a page of the table reads. Smaller than the panel's 50: each row holds two outputs side
 * by side, and 25 of them is already a long page to read.
 */
export const COMPARE_PAGE_SIZE = 25;

export interface CompareIds {
  threadId: string;
  a: string;
  b: string;
}

const comparePath = ({ threadId, a, b }: CompareIds) =>
  `/api/threads/${encodeURIComponent(threadId)}/subagent-batches/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`;

export const compareKeys = {
  summary: (ids: CompareIds) => ["compare", ids.threadId, ids.a, ids.b] as const,
  pairs: (ids: CompareIds, change: CompareChange) => ["compare", ids.threadId, ids.a, ids.b, "pairs", change] as const,
};

export function fetchCompareSummary(ids: CompareIds, signal?: AbortSignal): Promise<CompareSummary> {
  return fetchJson(compareSummarySchema, comparePath(ids), "comparison", { signal });
}

export function fetchComparePage(
  ids: CompareIds,
  opts: { change: CompareChange; cursor: string | null; limit?: number },
  signal?: AbortSignal,
): Promise<ComparePage> {
  const q = new URLSearchParams({ change: opts.change, limit: String(opts.limit ?? COMPARE_PAGE_SIZE) });
  if (opts.cursor) q.set("cursor", opts.cursor);
  return fetchJson(comparePageSchema, `${comparePath(ids)}/items?${q}`, "compared items", { signal });
}

/** compare.csv of the pairs one filter shows (every one of them, whatever is loaded here). */
export function compareCsvUrl(ids: CompareIds, change: CompareChange): string {
  return `${comparePath(ids)}/compare.csv${change === "all" ? "" : `?change=${change}`}`;
}

const finished = (s: CompareSummary) =>
  s.pending === 0 && ["completed", "failed", "cancelled"].includes(s.a.status) && ["completed", "failed", "cancelled"].includes(s.b.status);

/** The summary, from the page's first paint, polled while either batch still runs. */
export function useCompareSummary(ids: CompareIds, initialData: CompareSummary) {
  return useQuery({
    queryKey: compareKeys.summary(ids),
    queryFn: ({ signal }) => fetchCompareSummary(ids, signal),
    initialData,
    refetchInterval: (q) => (q.state.data && finished(q.state.data) ? false : ACTIVE_POLL_MS),
    retry: retryUnlessClientError,
  });
}

/** The pairs one Change filter shows, a page at a time ("Load more" reads the next cursor). */
export function useComparePairs(ids: CompareIds, change: CompareChange) {
  return useInfiniteQuery({
    queryKey: compareKeys.pairs(ids, change),
    queryFn: ({ pageParam, signal }) => fetchComparePage(ids, { change, cursor: pageParam }, signal),
    initialPageParam: null as string | null,
    getNextPageParam: (last) => last.next_cursor,
    placeholderData: keepPreviousData,
    retry: retryUnlessClientError,
  });
}

/**
 * The Change filter a comparison opens on: "changed". A person opens a comparison to see what
 * differs between the runs; the items that came out the same are already counted in the
 * summary, and with a large batch they would bury the few that moved. "All" is one choice away.
 */
export const DEFAULT_COMPARE_CHANGE: CompareChange = "changed";
