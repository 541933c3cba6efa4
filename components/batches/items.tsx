"use client";

import { keepPreviousData, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { memo, useCallback, useEffect, useId, useRef, useState } from "react";
import {
  type BatchProjection,
  type BatchStatus,
  type ItemProjection,
  type ItemStatus,
  itemStatusSchema,
} from "@/lib/api/batches";
import {
  appendPage,
  applyRefresh,
  canRetryItem,
  chainItems,
  firstPageChain,
  formatCount,
  formatTokens,
  isActiveBatch,
  type PageChain,
  refreshIndex,
  replaceItem,
} from "@/lib/batches-ui";
import { ITEM_STATUS_WORDS } from "@/lib/batches-ui";
import { fetchItems, retryItem } from "./api";
import { ItemToolCalls } from "@/components/tool-calls";
import { ACTIVE_POLL_MS, errorMessage, NO_WORKER_TITLE } from "./shared";
import { buttonClass, Spinner, StatusBadge } from "./ui";

type Filter = ItemStatus | "all";

/**
 * One page of items at a time. While the batch is active, each poll refreshes exactly one
 * loaded page (round-robin), so polling costs at most one page read per interval no matter
 * how many pages the user loaded with "Load more".
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
  const key = ["items", threadId, batch.id, filter] as const;
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
  const stale = query.isPlaceholderData;

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

      <div
        data-testid="items-scroll"
        className={`max-h-[28rem] overflow-auto rounded-md border border-zinc-200 transition-opacity ${stale ? "opacity-60" : ""}`}
      >
        <table className="w-full table-fixed border-collapse text-left text-xs" aria-busy={query.isFetching && !query.data}>
          <thead className="sticky top-0 z-10 bg-zinc-50 text-[11px] uppercase tracking-wide text-zinc-600 shadow-[0_1px_0_0_var(--color-zinc-200)]">
            <tr>
              <th scope="col" className="w-12 px-2 py-1.5 text-right font-medium">
                #
              </th>
              <th scope="col" className="w-44 px-2 py-1.5 font-medium">
                Item
              </th>
              <th scope="col" className="w-24 px-2 py-1.5 font-medium">
                Status
              </th>
              <th scope="col" className="hidden w-16 px-2 py-1.5 text-right font-medium @sm:table-cell">
                Attempts
              </th>
              <th scope="col" className="hidden py-1.5 pr-2 pl-4 font-medium @lg:table-cell">
                Preview
              </th>
              <th scope="col" className="hidden px-2 py-1.5 font-medium @2xl:table-cell">
                Error
              </th>
              <th scope="col" className="w-[4.5rem] px-2 py-1.5 font-medium">
                <span className="sr-only">Actions</span>
              </th>
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
              />
            ))}
            {items.length === 0 ? (
              <tr>
                <td colSpan={7} className="px-2 py-6 text-center text-zinc-600">
                  {query.isPending ? "Loading items…" : query.isError ? "" : "No items match this filter."}
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>

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

const ItemRow = memo(function ItemRow({
  item,
  threadId,
  batchId,
  batchStatus,
  workerAlive,
  maxAttempts,
}: {
  item: ItemProjection;
  threadId: string;
  batchId: string;
  batchStatus: BatchStatus;
  workerAlive: boolean;
  maxAttempts: number;
}) {
  const qc = useQueryClient();
  const [open, setOpen] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const detailId = useId();

  const setEverywhere = (next: ItemProjection) =>
    qc.setQueriesData<PageChain>({ queryKey: ["items", threadId, batchId] }, (c) => (c ? replaceItem(c, next) : c));
  const retry = useMutation({
    mutationFn: () => retryItem(threadId, batchId, item.id),
    onMutate: () => {
      setError(null);
      const before = item;
      setEverywhere({ ...item, status: "queued", error: null });
      return { before };
    },
    onError: (err, _v, ctx) => {
      if (ctx) setEverywhere(ctx.before);
      setError(errorMessage(err));
      setOpen(true);
    },
    onSuccess: (fresh) => setEverywhere(fresh),
    onSettled: () => qc.invalidateQueries({ queryKey: ["batches", threadId] }),
  });

  const retryable = item.status === "failed" || retry.isPending;
  const canRetry = canRetryItem(item.status, batchStatus, workerAlive) && !retry.isPending;
  return (
    <>
      <tr
        data-testid="item-row"
        data-item-key={item.item_key}
        data-status={item.status}
        className="h-8 border-t border-zinc-100 align-middle hover:bg-zinc-50"
      >
        <td className="px-2 text-right text-zinc-500 tabular-nums">{item.position}</td>
        <td className="px-2">
          <div className="flex min-w-0 items-center gap-1" title={item.input ? `${item.item_key}: ${item.input}` : item.item_key}>
            <button
              type="button"
              aria-expanded={open}
              aria-controls={detailId}
              onClick={() => setOpen((o) => !o)}
              className="flex shrink-0 items-center gap-1 rounded font-mono text-zinc-800 focus-visible:outline-2 focus-visible:outline-sky-600"
            >
              <svg aria-hidden viewBox="0 0 16 16" className={`size-3 shrink-0 transition-transform ${open ? "" : "-rotate-90"}`}>
                <path d="M4 6l4 4 4-4" fill="none" stroke="currentColor" strokeWidth="1.75" />
              </svg>
              <span>{item.item_key}</span>
            </button>
            {item.input && item.input !== item.item_key ? (
              <span data-testid="item-input" className="min-w-0 truncate text-zinc-500">
                {item.input}
              </span>
            ) : null}
          </div>
        </td>
        <td className="px-2">
          <StatusBadge status={item.status} />
        </td>
        <td data-testid="item-attempts" className="hidden px-2 text-right tabular-nums @sm:table-cell">
          {item.attempts}
          <span className="text-zinc-400">/{maxAttempts}</span>
        </td>
        <td className="hidden truncate py-0 pr-2 pl-4 text-zinc-700 @lg:table-cell" title={item.preview ?? undefined}>
          {item.preview ?? <span className="text-zinc-400">—</span>}
        </td>
        <td className="hidden truncate px-2 text-red-700 @2xl:table-cell" title={item.error ?? undefined}>
          {item.error ?? <span className="text-zinc-400">—</span>}
        </td>
        <td className="px-2 text-right">
          {retryable ? (
            <button
              type="button"
              disabled={!canRetry}
              title={workerAlive ? undefined : NO_WORKER_TITLE}
              aria-busy={retry.isPending || undefined}
              onClick={() => retry.mutate()}
              className={`${buttonClass.base} ${buttonClass.neutral} px-2 py-0.5 text-xs`}
            >
              {retry.isPending ? <Spinner /> : null}
              Retry
            </button>
          ) : null}
        </td>
      </tr>
      <tr id={detailId} hidden={!open} className="bg-zinc-50">
        <td colSpan={7} className="px-3 py-2">
          {open ? <ItemDetail item={item} maxAttempts={maxAttempts} error={error} threadId={threadId} batchId={batchId} /> : null}
        </td>
      </tr>
    </>
  );
});

function ItemDetail({
  item,
  maxAttempts,
  error,
  threadId,
  batchId,
}: {
  item: ItemProjection;
  maxAttempts: number;
  error: string | null;
  threadId: string;
  batchId: string;
}) {
  return (
    <div data-testid="item-detail" className="flex min-w-0 flex-col gap-2 text-xs">
      {error ? (
        <p role="alert" className="text-red-700">
          Retry failed: {error}
        </p>
      ) : null}
      <dl className="flex flex-wrap gap-x-4 gap-y-1 text-zinc-600">
        <div className="flex gap-1">
          <dt>Attempts</dt>
          <dd className="font-medium text-zinc-800 tabular-nums">
            {item.attempts} of {maxAttempts}
          </dd>
        </div>
        <div className="flex gap-1">
          <dt>Tokens</dt>
          <dd className="font-medium text-zinc-800 tabular-nums">
            {formatTokens(item.usage.input_tokens)} in · {formatTokens(item.usage.output_tokens)} out
          </dd>
        </div>
        {item.started_at ? (
          <div className="flex gap-1">
            <dt>Started</dt>
            <dd className="text-zinc-800">{new Date(item.started_at).toLocaleTimeString()}</dd>
          </div>
        ) : null}
        {item.finished_at ? (
          <div className="flex gap-1">
            <dt>Finished</dt>
            <dd className="text-zinc-800">{new Date(item.finished_at).toLocaleTimeString()}</dd>
          </div>
        ) : null}
      </dl>
      <div>
        <div className="font-medium text-zinc-600">Input</div>
        <pre
          data-testid="item-detail-input"
          className="mt-0.5 max-h-32 overflow-auto rounded border border-zinc-200 bg-white p-2 font-sans whitespace-pre-wrap break-words text-zinc-800"
        >
          {item.input || "—"}
          {item.input.length >= 200 ? <span className="text-zinc-400"> (first 200 characters; the JSONL has it all)</span> : null}
        </pre>
      </div>
      <div>
        <div className="font-medium text-zinc-600">Preview</div>
        <pre className="mt-0.5 max-h-64 overflow-auto rounded border border-zinc-200 bg-white p-2 font-sans whitespace-pre-wrap break-words text-zinc-800">
          {item.preview ?? "No result yet."}
        </pre>
      </div>
      <ItemToolCalls threadId={threadId} batchId={batchId} itemId={item.id} count={item.tool_calls} finishedAt={item.finished_at} />
      {item.error ? (
        <div>
          <div className="font-medium text-zinc-600">Error</div>
          <pre className="mt-0.5 max-h-40 overflow-auto rounded border border-red-200 bg-white p-2 font-sans whitespace-pre-wrap break-words text-red-800">
            {item.error}
          </pre>
        </div>
      ) : null}
    </div>
  );
}
