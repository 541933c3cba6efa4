"use client";

import { keepPreviousData, useInfiniteQuery, useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import Link from "next/link";
import { useRouter } from "next/navigation";
import { useId, useState } from "react";
import type { GoldenItem, GoldenSetDetail } from "@/lib/api/golden-sets";
import { formatCount } from "@/lib/format";
import { cellText } from "@/lib/result-columns";
import { ConfirmDialog } from "@/components/batches/confirm-cancel";
import { retryUnlessClientError } from "@/components/batches/panel-state";
import { ErrorText, shortId } from "@/components/batches/ui";
import { ClippedText, valueText } from "@/components/compare/clipped-text";
import { buttonClasses } from "@/components/ui/button";
import { DownloadLink } from "@/components/ui/download-link";
import { LoadMoreButton } from "@/components/ui/load-more";
import { StackedTable } from "@/components/ui/stacked-table";
import { deleteGoldenSet, fetchGoldenItems, fetchGoldenSet, goldenItemsJsonlPath, goldenKeys } from "./api";
import { LocalTime } from "./local-time";

const HEAD = "border-b border-zinc-200 px-3 py-1.5 font-medium";
const CELL = "block min-w-0 px-3 py-1 align-top md:table-cell md:py-2.5";

/**
 * A golden set's page: its versions (each immutable: items, where its answers came from, when),
 * the items of the version chosen a page at a time, the download of that version as JSONL, and
 * Delete. The route loaded the set (and answered 404 for another person's).
 */
export function GoldenSetView({ initialDetail }: { initialDetail: GoldenSetDetail }) {
  const router = useRouter();
  const qc = useQueryClient();
  const id = initialDetail.id;
  const detail = useQuery({
    queryKey: goldenKeys.detail(id),
    queryFn: ({ signal }) => fetchGoldenSet(id, signal),
    initialData: initialDetail,
    retry: retryUnlessClientError,
  }).data;
  const [version, setVersion] = useState(detail.version);
  const [confirming, setConfirming] = useState(false);
  const remove = useMutation({
    mutationFn: () => deleteGoldenSet(id),
    onSuccess: () => {
      qc.removeQueries({ queryKey: goldenKeys.detail(id) });
      void qc.invalidateQueries({ queryKey: goldenKeys.list });
      router.push("/golden-sets");
      router.refresh();
    },
  });
  const shown = detail.versions.find((v) => v.version === version) ?? detail.versions.at(-1)!;

  return (
    <div className="min-h-0 flex-1 overflow-y-auto p-4 sm:p-6">
      <div className="mx-auto max-w-6xl space-y-6">
        <header className="flex min-w-0 flex-wrap items-start gap-x-4 gap-y-2">
          <div className="min-w-0 flex-1">
            <Link href="/golden-sets" className="inline-flex items-center gap-1 text-xs text-sky-800 underline-offset-2 hover:underline">
              <span aria-hidden>←</span> Golden sets
            </Link>
            <h1 data-testid="golden-set-name" className="text-xl font-semibold tracking-tight wrap-anywhere">
              {detail.name}
            </h1>
            <p className="mt-1 text-sm text-zinc-500 tabular-nums">
              version {detail.version} · {formatCount(detail.versions.at(-1)?.items ?? 0)} items
            </p>
          </div>
          <button type="button" onClick={() => setConfirming(true)} className={buttonClasses("danger", "sm")}>
            Delete set…
          </button>
        </header>
        {remove.isError ? <ErrorText error={remove.error} /> : null}

        <Versions detail={detail} chosen={shown.version} onChoose={setVersion} />
        <Items setId={id} version={shown.version} count={shown.items} />
      </div>
      {confirming ? (
        <ConfirmDialog
          title="Delete this golden set?"
          testId="golden-delete-question"
          keepLabel="Keep it"
          confirmLabel="Delete set"
          danger
          disabled={remove.isPending}
          onConfirm={() => remove.mutate()}
          onClose={() => setConfirming(false)}
        >
          {detail.name}: all {detail.versions.length === 1 ? "of its one version" : `${detail.versions.length} versions`} and their items go.
          Batches that ran on it keep their results.
        </ConfirmDialog>
      ) : null}
    </div>
  );
}

function sourceText(source: GoldenSetDetail["versions"][number]["source"]) {
  return source.from === "batch" ? (
    <>
      reviewed batch <span className="font-mono">{shortId(source.batch_id)}</span>
    </>
  ) : (
    "items given"
  );
}

function Versions({ detail, chosen, onChoose }: { detail: GoldenSetDetail; chosen: number; onChoose: (v: number) => void }) {
  const captionId = useId();
  // The newest first: the one a person adds to and runs on.
  const versions = [...detail.versions].reverse();
  return (
    <section aria-labelledby={captionId} className="min-w-0 space-y-2">
      <h2 id={captionId} className="text-xs font-medium tracking-wide text-zinc-500 uppercase">
        Versions
      </h2>
      <div className="overflow-x-auto rounded-lg border border-zinc-200 bg-white">
        <table aria-labelledby={captionId} data-testid="golden-versions" className="w-full border-collapse text-left text-xs">
          <thead className="bg-zinc-50 text-zinc-600">
            <tr>
              <th scope="col" className={HEAD}>
                Version
              </th>
              <th scope="col" className={`${HEAD} text-right`}>
                Items
              </th>
              <th scope="col" className={HEAD}>
                Source
              </th>
              <th scope="col" className={HEAD}>
                Created
              </th>
            </tr>
          </thead>
          <tbody>
            {versions.map((v) => (
              <tr
                key={v.version}
                data-testid="golden-version"
                data-version={v.version}
                className={`border-t border-zinc-100 first:border-t-0 ${v.version === chosen ? "bg-sky-50" : ""}`}
              >
                <td className="px-3 py-2">
                  <button
                    type="button"
                    aria-pressed={v.version === chosen}
                    onClick={() => onChoose(v.version)}
                    className="font-medium text-sky-800 underline-offset-2 hover:underline aria-pressed:text-zinc-900 aria-pressed:no-underline"
                  >
                    v{v.version}
                    {v.version === chosen ? <span className="sr-only"> (shown)</span> : null}
                  </button>
                </td>
                <td className="px-3 py-2 text-right tabular-nums">{formatCount(v.items)}</td>
                <td className="px-3 py-2 text-zinc-700">{sourceText(v.source)}</td>
                <td className="px-3 py-2 whitespace-nowrap text-zinc-600 tabular-nums">
                  <LocalTime iso={v.created_at} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function Items({ setId, version, count }: { setId: string; version: number; count: number }) {
  const captionId = useId();
  const pages = useInfiniteQuery({
    queryKey: goldenKeys.items(setId, version),
    queryFn: ({ pageParam, signal }) => fetchGoldenItems(setId, version, pageParam, signal),
    initialPageParam: null as string | null,
    getNextPageParam: (last) => last.next_cursor,
    placeholderData: keepPreviousData,
    retry: retryUnlessClientError,
  });
  const items = pages.data?.pages.flatMap((p) => p.items) ?? [];
  const ready = !pages.isPlaceholderData && !pages.isPending;
  return (
    <section aria-labelledby={captionId} className="flex min-w-0 flex-col gap-2">
      <div className="flex flex-wrap items-center gap-x-3 gap-y-2">
        <h2 id={captionId} className="text-xs font-medium tracking-wide text-zinc-500 uppercase">
          Items of version {version}
        </h2>
        <span className="text-xs text-zinc-600 tabular-nums" data-testid="golden-items-count">
          {formatCount(items.length)} of {formatCount(count)} shown
        </span>
        <DownloadLink href={goldenItemsJsonlPath(setId, version)} className="ml-auto">
          items.jsonl
        </DownloadLink>
      </div>
      <StackedTable
        labelledBy={captionId}
        ready={ready}
        dimmed={pages.isPlaceholderData}
        data={{ "data-testid": "golden-items", "data-version": version }}
        columns={[{ head: "Item", width: "md:w-40" }, { head: "Input" }, { head: "Expected" }, { head: "Source", width: "md:w-44" }]}
        empty={items.length > 0 ? null : pages.isPending ? "Loading…" : pages.isError ? "" : "This version has no items."}
      >
        {items.map((item) => (
          <ItemRow key={item.item_key} item={item} />
        ))}
      </StackedTable>
      {pages.isError ? <ErrorText error={pages.error} /> : null}
      {pages.hasNextPage ? <LoadMoreButton loading={pages.isFetchingNextPage} onLoad={() => void pages.fetchNextPage()} /> : null}
    </section>
  );
}

/** A cell's label, shown only where the table's header is not (a narrow screen). */
function NarrowLabel({ children }: { children: React.ReactNode }) {
  return <p className="mb-0.5 text-[11px] font-medium tracking-wide text-zinc-500 uppercase md:hidden">{children}</p>;
}

function inputText(item: GoldenItem): string {
  if (item.fields)
    return Object.entries(item.fields)
      .map(([name, value]) => `${name}: ${cellText(value)}`)
      .join("\n");
  return item.input ?? "";
}

function ItemRow({ item }: { item: GoldenItem }) {
  return (
    <tr data-testid="golden-item" data-item-key={item.item_key} className="block border-t border-zinc-200 py-1.5 first:border-t-0 md:table-row md:py-0">
      <th scope="row" className={`${CELL} text-left font-normal`}>
        <span className="font-mono text-xs font-medium break-all text-zinc-900">{item.item_key}</span>
      </th>
      <td className={CELL}>
        <NarrowLabel>Input</NarrowLabel>
        <ClippedText text={inputText(item)} />
      </td>
      <td className={CELL} data-testid="golden-item-expected">
        <NarrowLabel>Expected</NarrowLabel>
        <ClippedText text={valueText(item.expected)} mono={typeof item.expected !== "string"} empty="none" />
      </td>
      <td className={`${CELL} text-zinc-700`} data-testid="golden-item-source">
        <NarrowLabel>Source</NarrowLabel>
        {item.source ? (
          <span>
            {item.source.decision === "corrected" ? "corrected by a person" : "accepted"} in{" "}
            <span className="font-mono">{shortId(item.source.batch_id)}</span>
          </span>
        ) : (
          <span className="text-zinc-500">given</span>
        )}
      </td>
    </tr>
  );
}
