"use client";

import type { UseMutationResult } from "@tanstack/react-query";
import { type ReactNode, useId } from "react";
import type { BatchProjection, ItemProjection } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";
import { buttonClasses } from "@/components/ui/button";
import { LoadMoreButton } from "@/components/ui/load-more";
import { matchingCount, type TableFilter } from "./toolbar";
import { ErrorText } from "./ui";
import { useItemPages } from "./use-item-pages";

/** What the table shows of each item: its header and one row (or more) per item. */
export interface ColumnSet {
  /** Names the view: test ids (`<name>-table`, `<name>-shown`), the page cache. */
  name: "items" | "results";
  caption: string;
  /**
   * "fit": fixed to the box's width. "scroll": as wide as its cells' text (it scrolls sideways in
   * its box). "fill": the box's width, its columns wrapping to fit, scrolling only past their
   * narrowest (a page at the screen's width).
   */
  layout: "fit" | "scroll" | "fill";
  empty: string;
  /** The columns for the loaded items (a column may show only while a loaded item needs it). */
  columns: (items: ItemProjection[]) => {
    /** How many columns a full-width cell spans. */
    span: number;
    head: ReactNode;
    row: (item: ItemProjection) => ReactNode;
  };
}

const TABLE_LAYOUT: Record<ColumnSet["layout"], string> = { fit: "w-full table-fixed", scroll: "w-max min-w-full", fill: "w-full" };

/**
 * A batch's items as one table, one page at a time: filtered on the server, paged with "Load
 * more" (rows append to the page itself; the oldest pages drop past a bound, "Back to the first
 * rows" returns). `set` says what a row shows (the Items or the Results view).
 */
export function BatchTable({
  threadId,
  batch,
  filter,
  set,
}: {
  threadId: string;
  batch: BatchProjection;
  filter: TableFilter;
  set: ColumnSet;
}) {
  const captionId = useId();
  const pages = useItemPages(threadId, batch, filter, set.name);
  const { query, items } = pages;
  const cols = set.columns(items);
  const scrolls = set.layout !== "fit";
  return (
    <div className="flex min-w-0 flex-col gap-2">
      <section
        aria-labelledby={captionId}
        // A wide table scrolls sideways in this box, by keyboard too; relative, so the cells'
        // visually hidden text (absolutely placed) stays inside it instead of widening the page.
        tabIndex={scrolls ? 0 : undefined}
        data-testid={`${set.name}-scroll`}
        className="relative max-w-full overflow-x-auto rounded-md ring-1 ring-zinc-200 focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        <table
          data-testid={`${set.name}-table`}
          aria-busy={query.isFetching && !query.data}
          className={`${TABLE_LAYOUT[set.layout]} border-collapse text-left text-xs transition-opacity ${query.isPlaceholderData ? "opacity-60" : ""}`}
        >
          <caption id={captionId} className="sr-only">
            {set.caption}
          </caption>
          {cols.head}
          <tbody>
            {items.map(cols.row)}
            {items.length === 0 ? (
              <tr>
                <td colSpan={cols.span} className="px-2 py-6 text-zinc-600">
                  {/* The message stays in view while a wide table scrolls. */}
                  <span className="sticky left-2">{query.isPending ? "Loading…" : query.isError ? "" : set.empty}</span>
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </section>
      {query.isError && !query.data ? <ErrorText error={query.error} /> : null}
      <Pager name={set.name} shown={items.length} matching={matchingCount(batch, filter)} {...pages} />
    </div>
  );
}

/** "Showing 50 of 120", "Back to the first rows" once older pages were dropped, then "Load more" or "End of list". */
function Pager({
  name,
  shown,
  matching,
  dropped,
  nextCursor,
  loadMore,
  loadError,
  restart,
}: {
  name: string;
  shown: number;
  matching: number | null;
  dropped: number;
  nextCursor: string | null;
  loadMore: UseMutationResult<void, Error, void>;
  loadError: string | null;
  restart: () => Promise<void>;
}) {
  return (
    <>
      <div className="flex flex-wrap items-center gap-2 text-xs text-zinc-600">
        <span data-testid={`${name}-shown`} className="tabular-nums">
          {dropped > 0 ? `Rows ${formatCount(dropped + 1)}–${formatCount(dropped + shown)}` : `Showing ${formatCount(shown)}`}
          {matching !== null ? ` of ${formatCount(Math.max(matching, dropped + shown))}` : ""}
        </span>
        {dropped > 0 ? (
          <button type="button" onClick={() => void restart()} className={buttonClasses("secondary", "xs")}>
            Back to the first rows
          </button>
        ) : null}
        {nextCursor !== null ? (
          <LoadMoreButton loading={loadMore.isPending} onLoad={() => loadMore.mutate()} />
        ) : shown > 0 ? (
          <span data-testid={`${name}-end`} className="ml-auto">
            End of list
          </span>
        ) : null}
      </div>
      {loadError ? <ErrorText error={loadError} /> : null}
    </>
  );
}
