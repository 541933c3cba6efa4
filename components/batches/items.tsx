"use client";

import { useId, useState } from "react";
import { type BatchProjection, type ItemStatus, itemStatusSchema } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";
import { ItemRow } from "./item-row";
import { errorMessage } from "./shared";
import { ITEM_STATUS_WORDS } from "./status";
import { buttonClass, Spinner } from "./ui";
import { useItemPages } from "./use-item-pages";

type Filter = ItemStatus | "all";

/**
 * The items of a batch, one page at a time, in the panel's own scroll ("Load more" appends
 * rows; nothing scrolls inside the panel). Each row opens to its whole input, result and tool
 * calls; a failed one has Retry.
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
  const [filter, setFilter] = useState<Filter>("all");
  const filterId = useId();
  const status = filter === "all" ? null : filter;
  const { query, items, nextCursor, dropped, loadMore, loadError, restart } = useItemPages(threadId, batch, { status }, "items");
  const matching = status === null ? batch.total : batch.counts[status];
  // The Retry column takes room only while a loaded item can use it.
  const withActions = items.some((i) => i.status === "failed");
  const columns = withActions ? 4 : 3;

  return (
    <div className="flex min-w-0 flex-col gap-2">
      <div className="flex flex-wrap items-center gap-2">
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
          {dropped > 0 ? `Rows ${formatCount(dropped + 1)}–${formatCount(dropped + items.length)}` : `Showing ${formatCount(items.length)}`} of{" "}
          {formatCount(Math.max(matching, dropped + items.length))}
        </span>
        {dropped > 0 ? (
          <button type="button" onClick={() => void restart()} className={`${buttonClass.base} ${buttonClass.neutral} px-2 py-0.5 text-xs`}>
            Back to the first rows
          </button>
        ) : null}
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
