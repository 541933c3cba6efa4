"use client";

import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useCallback, useEffect, useRef, useState } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { fetchItems, type ItemFilter } from "./api";
import { appendPage, applyRefresh, chainItems, firstPageChain, type PageChain, refreshIndex } from "./item-pages";
import { batchKeys } from "./panel-state";
import { ACTIVE_POLL_MS, errorMessage } from "./shared";
import { isActiveBatch } from "./status";

/**
 * A batch's items under one filter, as a chain of server pages (the Items list and the Results
 * table both read them so). While the batch is active, each poll refreshes exactly one loaded
 * page (round-robin), so polling costs at most one page read per interval however many pages
 * are loaded; "Load more" appends the next page and drops the oldest past MAX_LOADED_PAGES.
 */
const UNFINISHED = new Set(["pending", "queued", "leased", "running"]);

export function useItemPages(threadId: string, batch: BatchProjection, filter: ItemFilter, view: string) {
  const qc = useQueryClient();
  const [loadError, setLoadError] = useState<string | null>(null);
  const key = [...batchKeys.items(threadId, batch.id), view, filter.status ?? "all", filter.verdict ?? "all", filter.check ?? "", filter.q ?? ""] as const;
  const active = isActiveBatch(batch.status);

  const { status = null, verdict = null, check = null, q = null } = filter;
  const fetchPage = useCallback(
    (cursor: string | null, signal?: AbortSignal) => fetchItems(threadId, batch.id, { status, verdict, check, q, cursor }, signal),
    [threadId, batch.id, status, verdict, check, q],
  );

  const query = useQuery({
    queryKey: key,
    queryFn: async ({ signal }) => {
      const current = qc.getQueryData<PageChain>(key);
      if (!current) return firstPageChain(await fetchPage(null, signal));
      const index = refreshIndex(current);
      const cursor = current.pages[index].cursor;
      const page = await fetchPage(cursor, signal);
      // Apply to the latest chain: "Load more" may have appended while this was in flight.
      return applyRefresh(qc.getQueryData<PageChain>(key) ?? current, index, cursor, page);
    },
    // Also while a loaded row is unfinished: the batch may have settled (again, after a retry)
    // between the panel's polls, and a row must not stay "running" for good.
    refetchInterval: (q) => (active || chainItems(q.state.data).some((i) => UNFINISHED.has(i.status)) ? ACTIVE_POLL_MS : false),
    placeholderData: keepPreviousData,
  });

  // When the batch settles, bring every loaded page up to date once (polling stops after).
  // Keyed on the settlement's time, not on an active → finished edge the panel's polls saw: a
  // retry can reopen and settle a batch again between two polls (the rows stayed "running").
  const settledAt = batch.finished_at;
  const lastSettled = useRef(settledAt);
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs when the batch settles (again)
  useEffect(() => {
    const settled = settledAt !== null && settledAt !== lastSettled.current;
    lastSettled.current = settledAt;
    if (!settled) return;
    void (async () => {
      let chain = qc.getQueryData<PageChain>(key);
      for (let i = 0; chain && i < chain.pages.length; i++) {
        const cursor = chain.pages[i].cursor;
        const page = await fetchPage(cursor).catch(() => null);
        if (!page) return;
        chain = applyRefresh(qc.getQueryData<PageChain>(key) ?? chain, i, cursor, page);
        qc.setQueryData(key, chain);
      }
    })();
  }, [settledAt]);

  const loadMore = useMutation({
    mutationFn: async () => {
      const chain = qc.getQueryData<PageChain>(key);
      if (!chain?.nextCursor) return;
      const cursor = chain.nextCursor;
      const page = await fetchPage(cursor);
      qc.setQueryData<PageChain>(key, (c) => (c ? appendPage(c, cursor, page) : c));
    },
    onMutate: () => setLoadError(null),
    onError: (err) => setLoadError(errorMessage(err)),
  });

  return {
    query,
    items: chainItems(query.data),
    nextCursor: query.data?.nextCursor ?? null,
    /** Rows before the first loaded one, dropped to keep the tree bounded. */
    dropped: query.data?.dropped ?? 0,
    loadMore,
    loadError,
    /** Back to the first page (after older pages were dropped). */
    restart: () => qc.resetQueries({ queryKey: key, exact: true }),
  };
}
