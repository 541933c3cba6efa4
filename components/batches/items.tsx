"use client";

import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useCallback, useEffect, useId, useRef, useState } from "react";
import { type BatchProjection, type ItemStatus, itemStatusSchema } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";
import { fetchItems } from "./api";
import { appendPage, applyRefresh, chainItems, firstPageChain, type PageChain, refreshIndex } from "./item-pages";
import { ItemRow } from "./item-row";
import { batchKeys } from "./panel-state";
import { ACTIVE_POLL_MS, errorMessage } from "./shared";
import { isActiveBatch, ITEM_STATUS_WORDS } from "./status";
import { buttonClass, Spinner } from "./ui";

type Filter = ItemStatus | "all";

/**
 * The items of a batch, one page at a time, in the panel's own scroll ("Load more" appends
 * rows; nothing scrolls inside the panel). While the batch is active, each poll refreshes
 * exactly one loaded page (round-robin), so polling costs at most one page read per interval
 * however many pages are loaded.
 */
export function ItemsSection({
  threadId,
  batch,
  workerAlive,
}: {
  threadId: string;
  batch: BatchProjection;
  workerAlive: boolean;
}) {
  const qc = useQueryClient();
  const [filter, setFilter] = useState<Filter>("all");
  const [loadError, setLoadError] = useState<string | null>(null);
  const filterId = useId();
  const status = filter === "all" ? null : filter;
  const key = [...batchKeys.items(threadId, batch.id), filter] as const;
  const active = isActiveBatch(batch.status);

  const fetchPage = useCallback(
    (cursor: string | null, signal?: AbortSignal) => fetchItems(threadId, batch.id, { status, cursor }, signal),
    [threadId, batch.id, status],
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
    refetchInterval: active ? ACTIVE_POLL_MS : false,
    placeholderData: keepPreviousData,
  });

  // When the batch finishes, bring every loaded page up to date once (polling stops after).
  const wasActive = useRef(active);
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs on the active → finished edge only
  useEffect(() => {
    const finished = wasActive.current && !active;
    wasActive.current = active;
    if (!finished) return;
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
  }, [active]);

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

  const items = chainItems(query.data);
  const nextCursor = query.data?.nextCursor ?? null;
  const matching = status === null ? batch.total : batch.counts[status];
  // The Retry column takes room only while a loaded item can use it.
  const withActions = items.some((i) => i.status === "failed");
  const columns = withActions ? 4 : 3;

  return (
    <div className="flex min-w-0 flex-col gap-2 border-t border-zinc-200 pt-3">
      <div className="flex flex-wrap items-center gap-2">
        <h4 className="font-semibold">Items</h4>
        <label htmlFor={filterId} className="ml-auto text-xs text-zinc-600">
          Status
        </label>
        <select
          id={filterId}
          value={filter}
          onChange={(e) => setFilter(e.target.value as Filter)}
          className="rounded-md border border-zinc-300 bg-white px-2 py-1 text-sm focus-visible:outline-2 focus-visible:outline-sky-600"
        >
          <option value="all">All ({formatCount(batch.total)})</option>
          {itemStatusSchema.options.map((s) => (
            <option key={s} value={s}>
              {ITEM_STATUS_WORDS[s]} ({formatCount(batch.counts[s])})
            </option>
          ))}
        </select>
      </div>

      <table
        data-testid="items-table"
        aria-busy={query.isFetching && !query.data}
        className={`w-full table-fixed border-collapse rounded-md text-left text-xs ring-1 ring-zinc-200 transition-opacity ${query.isPlaceholderData ? "opacity-60" : ""}`}
      >
        <colgroup>
          <col className="w-9" />
          <col />
          <col className="w-24" />
          {withActions ? <col className="w-[4.5rem]" /> : null}
        </colgroup>
        <thead className="bg-zinc-50 text-[11px] font-medium text-zinc-600">
          <tr>
            <th scope="col" className="px-2 py-1.5 text-right font-medium">
              #
            </th>
            <th scope="col" className="px-2 py-1.5 font-medium">
              Item <span className="font-normal text-zinc-500">· result</span>
            </th>
            <th scope="col" className="px-2 py-1.5 font-medium">
              Status
            </th>
            {withActions ? (
              <th scope="col" className="px-2 py-1.5">
                <span className="sr-only">Actions</span>
              </th>
            ) : null}
          </tr>
        </thead>
        <tbody>
          {items.map((item) => (
            <ItemRow
              key={item.id}
              item={item}
              threadId={threadId}
              batchId={batch.id}
              batchStatus={batch.status}
              workerAlive={workerAlive}
              maxAttempts={batch.max_attempts}
              columns={columns}
            />
          ))}
          {items.length === 0 ? (
            <tr>
              <td colSpan={columns} className="px-2 py-6 text-center text-zinc-600">
                {query.isPending ? "Loading items…" : query.isError ? "" : "No items match this filter."}
              </td>
            </tr>
          ) : null}
        </tbody>
      </table>

      {query.isError && !query.data ? (
        <p role="alert" className="text-xs text-red-700">
          {errorMessage(query.error)}
        </p>
      ) : null}

      <div className="flex flex-wrap items-center gap-2 text-xs text-zinc-600">
        <span data-testid="items-shown" className="tabular-nums">
          Showing {formatCount(items.length)} of {formatCount(Math.max(matching, items.length))}
        </span>
        {nextCursor !== null ? (
          <button
            type="button"
            onClick={() => loadMore.mutate()}
            disabled={loadMore.isPending}
            aria-busy={loadMore.isPending || undefined}
            className={`${buttonClass.base} ${buttonClass.neutral} ml-auto`}
          >
            {loadMore.isPending ? <Spinner /> : null}
            Load more
          </button>
        ) : items.length > 0 ? (
          <span data-testid="items-end" className="ml-auto">
            End of list
          </span>
        ) : null}
      </div>
      {loadError ? (
        <p role="alert" className="text-xs text-red-700">
          {loadError}
        </p>
      ) : null}
    </div>
  );
}
