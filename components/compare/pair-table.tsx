"use client";

import { useId } from "react";
import { COMPARE_CHANGES, type CompareChange, type CompareSummary } from "@/lib/api/compare";
import { formatCount } from "@/lib/format";
import { ErrorText } from "@/components/batches/ui";
import { DownloadLink } from "@/components/ui/download-link";
import { LoadMoreButton } from "@/components/ui/load-more";
import { StackedTable } from "@/components/ui/stacked-table";
import { type CompareIds, compareCsvUrl, useComparePairs } from "./api";
import { PairRow } from "./pair-row";


const CHANGE_WORDS: Record<CompareChange, string> = {
  improved: "Improved",
  regressed: "Regressed",
  changed: "Changed",
  same: "Same",
  all: "All",
};

/** How many pairs a filter holds, where the summary says (changed and same it does not count). */
function filterCount(summary: CompareSummary, change: CompareChange): number | null {
  if (change === "improved") return summary.verdicts.improved;
  if (change === "regressed") return summary.verdicts.regressed;
  if (change === "all") return summary.items.matched;
  return null;
}

const EMPTY: Record<CompareChange, string> = {
  improved: "No item improved.",
  regressed: "No item regressed.",
  changed: "No finished item changed its output or verdict.",
  same: "No item came out the same.",
  all: "The two batches share no item key.",
};

/** The matched items side by side, filtered by how they changed, a page at a time. */
export function PairTable({
  ids,
  summary,
  change,
  onChange,
}: {
  ids: CompareIds;
  summary: CompareSummary;
  change: CompareChange;
  onChange: (change: CompareChange) => void;
}) {
  const selectId = useId();
  const captionId = useId();
  const pairs = useComparePairs(ids, change);
  const items = pairs.data?.pages.flatMap((p) => p.items) ?? [];
  const ready = !pairs.isPlaceholderData && !pairs.isPending;
  const matching = filterCount(summary, change);
  return (
    <section aria-labelledby={captionId} className="flex min-w-0 flex-col gap-2">
      <div className="flex flex-wrap items-center gap-x-3 gap-y-2">
        <h2 id={captionId} className="text-xs font-medium tracking-wide text-zinc-500 uppercase">
          Items side by side
        </h2>
        <label htmlFor={selectId} className="ml-auto flex items-center gap-1.5 text-xs text-zinc-600">
          Change
          <select
            id={selectId}
            aria-label="Change"
            value={change}
            onChange={(e) => onChange(e.target.value as CompareChange)}
            className="rounded-md border border-zinc-300 bg-white px-2 py-1 text-sm text-zinc-900 focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            {COMPARE_CHANGES.map((c) => {
              const n = filterCount(summary, c);
              return (
                <option key={c} value={c}>
                  {CHANGE_WORDS[c]}
                  {n === null ? "" : ` (${formatCount(n)})`}
                </option>
              );
            })}
          </select>
        </label>
        <DownloadLink href={compareCsvUrl(ids, change)}>compare.csv</DownloadLink>
      </div>

      {/* On a narrow screen its rows stack as cards (pair-row.tsx). */}
      <StackedTable
        labelledBy={captionId}
        ready={ready}
        dimmed={pairs.isPlaceholderData}
        data={{ "data-testid": "pair-table", "data-change": change }}
        columns={[
          { head: "Item", width: "md:w-36" },
          { head: "Input" },
          { head: `A · ${summary.a.model}`, title: summary.a.title },
          { head: `B · ${summary.b.model}`, title: summary.b.title },
          { head: "Change", width: "md:w-28" },
        ]}
        empty={items.length > 0 ? null : pairs.isPending ? "Loading…" : pairs.isError ? "" : EMPTY[change]}
        emptyTestId="pair-empty"
      >
        {items.map((pair) => (
          <PairRow key={pair.item_key} pair={pair} />
        ))}
      </StackedTable>
      {pairs.isError ? <ErrorText error={pairs.error} /> : null}

      <div className="flex flex-wrap items-center gap-2 text-xs text-zinc-600">
        <span data-testid="pair-shown" className="tabular-nums">
          Showing {formatCount(items.length)}
          {matching !== null ? ` of ${formatCount(Math.max(matching, items.length))}` : ""}
        </span>
        {pairs.hasNextPage ? (
          <LoadMoreButton loading={pairs.isFetchingNextPage} onLoad={() => void pairs.fetchNextPage()} />
        ) : items.length > 0 && ready ? (
          <span data-testid="pair-end" className="ml-auto">
            End of list
          </span>
        ) : null}
      </div>
    </section>
  );
}
