"use client";

import { useId } from "react";
import { COMPARE_CHANGES, type CompareChange, type CompareSummary } from "@/lib/api/compare";
import { formatCount } from "@/lib/format";
import { ErrorText } from "@/components/batches/ui";
import { DownloadLink } from "@/components/ui/download-link";
import { LoadMoreButton } from "@/components/ui/load-more";
import { type CompareIds, compareCsvUrl, useComparePairs } from "./api";
import { PairRow } from "./pair-row";

const HEAD = "border-b border-zinc-200 px-3 py-1.5 font-medium";

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

      {/* A table at a wide screen's width; on a narrow one its rows stack as cards (pair-row.tsx). */}
      <div className="min-w-0 overflow-hidden rounded-lg border border-zinc-200 bg-white">
        <table
          aria-labelledby={captionId}
          aria-busy={!ready || undefined}
          data-testid="pair-table"
          data-change={change}
          data-ready={ready ? "true" : "false"}
          className={`block w-full border-collapse text-left text-xs transition-opacity md:table md:table-fixed ${pairs.isPlaceholderData ? "opacity-60" : ""}`}
        >
          <colgroup className="max-md:hidden">
            <col className="md:w-36" />
            <col />
            <col />
            <col />
            <col className="md:w-28" />
          </colgroup>
          <thead className="bg-zinc-50 text-zinc-600 max-md:hidden">
            <tr>
              <th scope="col" className={HEAD}>
                Item
              </th>
              <th scope="col" className={HEAD}>
                Input
              </th>
              <th scope="col" className={`${HEAD} truncate`} title={summary.a.title}>
                A · {summary.a.model}
              </th>
              <th scope="col" className={`${HEAD} truncate`} title={summary.b.title}>
                B · {summary.b.model}
              </th>
              <th scope="col" className={HEAD}>
                Change
              </th>
            </tr>
          </thead>
          <tbody className="block md:table-row-group">
            {items.map((pair) => (
              <PairRow key={pair.item_key} pair={pair} />
            ))}
            {items.length === 0 ? (
              <tr className="block md:table-row">
                <td colSpan={5} data-testid="pair-empty" className="block px-3 py-6 text-sm text-zinc-600 md:table-cell">
                  {pairs.isPending ? "Loading…" : pairs.isError ? "" : EMPTY[change]}
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </div>
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
