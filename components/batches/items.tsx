"use client";

import { useState } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { BatchTable, type ColumnSet } from "./batch-table";
import { ItemRow } from "./item-row";
import { Downloads, FilterBar, NO_FILTER, type TableFilter } from "./toolbar";

/** The Items view's columns: #, the item and its result on two lines, status and attempts, and Retry while a loaded item failed. */
function itemColumns(threadId: string, batch: BatchProjection, workerAlive: boolean): ColumnSet {
  return {
    name: "items",
    caption: "Items: one row per item",
    layout: "fit",
    empty: "No items match this filter.",
    columns: (items) => {
      // The Retry column takes room only while a loaded item can use it.
      const withActions = items.some((i) => i.status === "failed");
      const span = withActions ? 4 : 3;
      return {
        span,
        head: (
          <>
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
          </>
        ),
        row: (item) => (
          <ItemRow
            key={item.id}
            item={item}
            threadId={threadId}
            batchId={batch.id}
            batchStatus={batch.status}
            workerAlive={workerAlive}
            maxAttempts={batch.max_attempts}
            columns={span}
          />
        ),
      };
    },
  };
}

/**
 * The items of a batch, one page at a time, in the panel's own scroll. Each row opens to its
 * whole input, result, checks and tool calls; a failed one has Retry.
 */
export function ItemsSection({ threadId, batch, workerAlive }: { threadId: string; batch: BatchProjection; workerAlive: boolean }) {
  const [filter, setFilter] = useState<TableFilter>(NO_FILTER);
  return (
    <div className="flex min-w-0 flex-col gap-2">
      <div className="flex flex-wrap items-center gap-2">
        <FilterBar batch={batch} filter={filter} onChange={setFilter} verdict={batch.checks.length > 0} />
        <Downloads threadId={threadId} batchId={batch.id} filter={filter} />
      </div>
      <BatchTable threadId={threadId} batch={batch} filter={filter} set={itemColumns(threadId, batch, workerAlive)} />
    </div>
  );
}
