"use client";

import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef, useState } from "react";
import type { CompareChange, CompareSummary } from "@/lib/api/compare";
import { ErrorText } from "@/components/batches/ui";
import { type CompareIds, compareKeys, DEFAULT_COMPARE_CHANGE, useCompareSummary } from "./api";
import { BatchSides } from "./batch-sides";
import { CheckChanges } from "./check-changes";
import { PairTable } from "./pair-table";
import { SettingChanges } from "./setting-changes";
import { VerdictSummary } from "./verdict-summary";

/**
 * Two batches compared item by item (DESIGN "Judging a batch"): both batches and their figures,
 * improved and regressed with the p-value in words, each check's change, and the items side by
 * side with a Change filter (in the address, so a reload or a shared link keeps it) and Load more.
 * While either batch runs the summary is polled, and the loaded pairs are read again whenever
 * the count of unfinished pairs moves.
 */
export function ComparePage({
  ids,
  initialSummary,
  initialChange,
}: {
  ids: CompareIds;
  initialSummary: CompareSummary;
  /** The address's `?change=` (null: none, or not a filter). */
  initialChange: CompareChange | null;
}) {
  const qc = useQueryClient();
  const summary = useCompareSummary(ids, initialSummary);
  const data = summary.data;
  const [change, setChange] = useState<CompareChange>(initialChange ?? DEFAULT_COMPARE_CHANGE);

  const pending = data.pending;
  const lastPending = useRef(pending);
  // biome-ignore lint/correctness/useExhaustiveDependencies: runs when the unfinished pairs' count moves
  useEffect(() => {
    if (pending === lastPending.current) return;
    lastPending.current = pending;
    void qc.invalidateQueries({ queryKey: [...compareKeys.summary(ids), "pairs"] });
  }, [pending]);

  return (
    <div data-testid="compare-page" className="flex min-w-0 flex-col gap-4">
      <BatchSides summary={data} />
      <SettingChanges differences={data.differences} />
      <VerdictSummary summary={data} />
      {summary.isError ? <ErrorText error={summary.error} /> : null}
      <CheckChanges checks={data.checks} />
      <PairTable
        ids={ids}
        summary={data}
        change={change}
        onChange={(next) => {
          setChange(next);
          const q = new URLSearchParams(window.location.search);
          q.set("change", next);
          window.history.replaceState(null, "", `${window.location.pathname}?${q}`);
        }}
      />
    </div>
  );
}
