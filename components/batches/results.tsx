"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { memo, useId, useState } from "react";
import { type Verdict, verdictSchema } from "@/lib/api/batch-data";
import { type BatchProjection, type ItemProjection, type ItemStatus, itemStatusSchema } from "@/lib/api/batches";
import { formatCount, formatDuration, formatTokens, formatUsd } from "@/lib/format";
import { cellText, inputFields, itemDurationMs, outputField, type ResultColumns, resultColumns } from "@/lib/result-columns";
import { resultsCsvUrl, retryFailedChecks } from "./api";
import { CheckMark } from "./check-mark";
import { batchKeys } from "./panel-state";
import { errorMessage, NO_WORKER_TITLE } from "./shared";
import { ITEM_STATUS_WORDS } from "./status";
import { buttonClass, Spinner, StatusBadge } from "./ui";
import { useItemPages } from "./use-item-pages";

const VERDICT_WORDS: Record<Verdict, string> = { passed: "Passed", failed: "Failed" };
const selectClass =
  "rounded-md border border-zinc-300 bg-white px-2 py-1 text-sm focus-visible:outline-2 focus-visible:outline-sky-600";
/** The sticky first column: opaque, with an edge, above the cells that scroll under it. */
const stickyCell = "sticky left-0 z-[1] bg-inherit shadow-[inset_-1px_0_0_var(--color-zinc-200)]";

/** Whether a batch produces data (the panel opens on its Results). */
export function producesData(batch: BatchProjection): boolean {
  return batch.checks.length > 0 || batch.output_fields.length > 0 || batch.input_fields.length > 0;
}

/**
 * A batch's results as a table: one row per item with its input, the output's fields, each
 * check, the verdict, cost (tokens on hover) and duration. Filtered on the server (Status, Verdict), paged with
 * "Load more"; it scrolls sideways inside its own box with the item column kept in view.
 */
export function ResultsSection({ threadId, batch, workerAlive }: { threadId: string; batch: BatchProjection; workerAlive: boolean }) {
  const ids = { status: useId(), verdict: useId(), caption: useId() };
  const [status, setStatus] = useState<ItemStatus | "all">("all");
  const [verdict, setVerdict] = useState<Verdict | "all">("all");
  const filter = { status: status === "all" ? null : status, verdict: verdict === "all" ? null : verdict };
  const { query, items, nextCursor, dropped, loadMore, loadError, restart } = useItemPages(threadId, batch, filter, "results");
  const columns = resultColumns(batch);
  const width = 1 + Math.max(1, columns.input.length) + Math.max(1, columns.output.length) + columns.checks.length + 4;
  const matching =
    filter.verdict !== null ? (filter.status === null ? batch.verdicts[filter.verdict] : null) : filter.status === null ? batch.total : batch.counts[filter.status];

  return (
    <div className="flex min-w-0 flex-col gap-2">
      <div className="flex flex-wrap items-center gap-x-3 gap-y-2">
        <span className="flex items-center gap-1.5">
          <label htmlFor={ids.status} className="text-xs text-zinc-600">
            Status
          </label>
          <select id={ids.status} value={status} onChange={(e) => setStatus(e.target.value as ItemStatus | "all")} className={selectClass}>
            <option value="all">All ({formatCount(batch.total)})</option>
            {itemStatusSchema.options.map((s) => (
              <option key={s} value={s}>
                {ITEM_STATUS_WORDS[s]} ({formatCount(batch.counts[s])})
              </option>
            ))}
          </select>
        </span>
        <span className="flex items-center gap-1.5">
          <label htmlFor={ids.verdict} className="text-xs text-zinc-600">
            Verdict
          </label>
          <select id={ids.verdict} value={verdict} onChange={(e) => setVerdict(e.target.value as Verdict | "all")} className={selectClass}>
            <option value="all">All</option>
            {verdictSchema.options.map((v) => (
              <option key={v} value={v}>
                {VERDICT_WORDS[v]} ({formatCount(batch.verdicts[v])})
              </option>
            ))}
          </select>
        </span>
      </div>

      <CheckSummary batch={batch} />
      <ResultActions threadId={threadId} batch={batch} workerAlive={workerAlive} />

      <section
        aria-labelledby={ids.caption}
        // A scroll box keyboard users can scroll too; relative, so the cells' visually hidden
        // text (absolutely placed) stays inside it instead of widening the page.
        // biome-ignore lint/a11y/noNoninteractiveTabindex: the table scrolls sideways inside this box
        tabIndex={0}
        data-testid="results-scroll"
        className="relative max-w-full overflow-x-auto rounded-md ring-1 ring-zinc-200 focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        <table
          data-testid="results-table"
          aria-busy={query.isFetching && !query.data}
          className={`w-max min-w-full border-collapse text-left text-xs transition-opacity ${query.isPlaceholderData ? "opacity-60" : ""}`}
        >
          <caption id={ids.caption} className="sr-only">
            Results: one row per item
          </caption>
          <thead className="text-[11px] text-zinc-600">
            <tr className="bg-zinc-50">
              <Th className={stickyCell}>Item</Th>
              {columns.input.length > 0 ? columns.input.map((f) => <Th key={`in-${f}`}>{f}</Th>) : <Th>Input</Th>}
              {columns.output.length > 0 ? columns.output.map((c) => <Th key={`out-${c.field}`}>{c.header}</Th>) : <Th>Result</Th>}
              {columns.checks.map((name) => (
                <Th key={`check-${name}`} className="text-center">
                  {name}
                </Th>
              ))}
              <Th>Verdict</Th>
              <Th>Status</Th>
              <Th className="text-right">Cost</Th>
              <Th className="text-right">Duration</Th>
            </tr>
          </thead>
          <tbody>
            {items.map((item) => (
              <ResultRow key={item.id} item={item} columns={columns} />
            ))}
            {items.length === 0 ? (
              <tr>
                {/* The message stays in view while the wide table scrolls. */}
                <td colSpan={width} className="px-2 py-6 text-zinc-600">
                  <span className="sticky left-2">
                    {query.isPending ? "Loading results…" : query.isError ? "" : "No items match these filters."}
                  </span>
                </td>
              </tr>
            ) : null}
          </tbody>
        </table>
      </section>

      {query.isError && !query.data ? (
        <p role="alert" className="text-xs text-red-700">
          {errorMessage(query.error)}
        </p>
      ) : null}

      <div className="flex flex-wrap items-center gap-2 text-xs text-zinc-600">
        <span data-testid="results-shown" className="tabular-nums">
          {dropped > 0
            ? `Rows ${formatCount(dropped + 1)}–${formatCount(dropped + items.length)}`
            : `Showing ${formatCount(items.length)}`}
          {matching !== null ? ` of ${formatCount(Math.max(matching, dropped + items.length))}` : ""}
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
          <span className="ml-auto">End of list</span>
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

function Th({ children, className = "" }: { children: React.ReactNode; className?: string }) {
  return (
    <th scope="col" className={`px-2 py-1.5 font-medium whitespace-nowrap ${className}`}>
      {children}
    </th>
  );
}

/** How the batch's items fare: the verdicts and each check's passes and failures so far. */
function CheckSummary({ batch }: { batch: BatchProjection }) {
  if (batch.checks.length === 0) return null;
  return (
    <ul aria-label="Checks" data-testid="check-summary" className="flex flex-wrap gap-1.5 text-xs">
      {batch.checks.map((c) => (
        <li key={c.name} className="rounded-full bg-zinc-100 px-2 py-0.5 text-zinc-700 tabular-nums">
          <span className="font-medium text-zinc-900">{c.name}</span> {formatCount(c.passed)} of {formatCount(c.passed + c.failed)} passed
        </li>
      ))}
    </ul>
  );
}

/** "Retry failed checks" (every finished item whose verdict is failed) and "Download CSV" (all rows). */
function ResultActions({ threadId, batch, workerAlive }: { threadId: string; batch: BatchProjection; workerAlive: boolean }) {
  const qc = useQueryClient();
  const retry = useMutation({
    mutationFn: () => retryFailedChecks(threadId, batch.id),
    onSettled: () => {
      void qc.invalidateQueries({ queryKey: batchKeys.list(threadId) });
      void qc.invalidateQueries({ queryKey: batchKeys.items(threadId, batch.id) });
    },
  });
  const canRetry = workerAlive && batch.status !== "cancelled" && batch.verdicts.failed > 0 && !retry.isPending;
  const title = !workerAlive
    ? NO_WORKER_TITLE
    : batch.status === "cancelled"
      ? "A cancelled batch cannot be retried."
      : batch.verdicts.failed === 0
        ? "No finished item failed a check."
        : undefined;
  return (
    <div className="flex flex-wrap items-center gap-2">
      <span title={title}>
        <button
          type="button"
          disabled={!canRetry}
          aria-busy={retry.isPending || undefined}
          onClick={() => retry.mutate()}
          className={`${buttonClass.base} ${buttonClass.neutral}`}
        >
          {retry.isPending ? <Spinner /> : null}
          Retry failed checks
        </button>
      </span>
      <a href={resultsCsvUrl(threadId, batch.id)} download className={`${buttonClass.base} ${buttonClass.neutral} ml-auto`}>
        <svg aria-hidden viewBox="0 0 16 16" className="size-3.5">
          <path d="M8 2v8m0 0L5 7m3 3l3-3M3 13h10" fill="none" stroke="currentColor" strokeWidth="1.5" />
        </svg>
        Download CSV
      </a>
      <p role="status" data-testid="retry-checks-feedback" className="basis-full text-xs text-zinc-700 empty:hidden">
        {retry.isSuccess
          ? retry.data.retried === 0
            ? "No items needed a retry."
            : `Retried ${formatCount(retry.data.retried)} ${retry.data.retried === 1 ? "item" : "items"}.`
          : ""}
      </p>
      {retry.isError ? (
        <p role="alert" className="basis-full text-xs text-red-700">
          {errorMessage(retry.error)}
        </p>
      ) : null}
    </div>
  );
}

/** A cell's text, clamped to a few lines, whole on hover. */
function Text({ value, className = "" }: { value: string; className?: string }) {
  return (
    <div title={value} className={`line-clamp-3 max-w-64 min-w-16 wrap-anywhere whitespace-pre-wrap ${className}`}>
      {value}
    </div>
  );
}

const td = "px-2 py-1.5 align-top";

const ResultRow = memo(function ResultRow({ item, columns }: { item: ItemProjection; columns: ResultColumns }) {
  const fields = columns.input.length > 0 ? inputFields(item.input) : null;
  const duration = itemDurationMs(item);
  const answerless = item.output === null || item.output === undefined;
  return (
    <tr
      data-testid="result-row"
      data-item-key={item.item_key}
      data-status={item.status}
      data-verdict={item.verdict ?? ""}
      className="border-t border-zinc-100 bg-white"
    >
      <th scope="row" className={`${td} ${stickyCell} text-left font-normal`}>
        <div title={item.item_key} className="max-w-28 truncate font-mono text-zinc-800">
          {item.item_key}
        </div>
      </th>
      {columns.input.length === 0 || !fields ? (
        // String items, or fields cut past reading: the input as it is.
        <td colSpan={Math.max(1, columns.input.length)} className={td}>
          <Text value={item.input} />
        </td>
      ) : (
        columns.input.map((f) => (
          <td key={`in-${f}`} className={td}>
            <Text value={cellText(fields[f])} />
          </td>
        ))
      )}
      {item.error || (columns.output.length > 0 && answerless) ? (
        <td colSpan={Math.max(1, columns.output.length)} className={td}>
          {item.error ? (
            <Text value={item.error} className="text-red-700" />
          ) : item.preview ? (
            <Text value={item.preview} className="text-zinc-600" />
          ) : (
            <span className="text-zinc-400">{item.status === "succeeded" ? "empty answer" : "no result yet"}</span>
          )}
        </td>
      ) : columns.output.length > 0 ? (
        columns.output.map((c) => (
          <td key={`out-${c.field}`} className={td}>
            <Text value={cellText(outputField(item.output, c.field))} />
          </td>
        ))
      ) : (
        <td className={td}>
          <Text value={item.preview ?? cellText(item.output)} />
        </td>
      )}
      {columns.checks.map((name) => (
        <td key={`check-${name}`} className={`${td} text-center`}>
          <CheckMark result={item.checks.find((c) => c.name === name)} />
        </td>
      ))}
      <td className={td}>
        {item.verdict ? (
          <span
            data-testid="verdict"
            className={`rounded-full px-2 py-0.5 font-medium ring-1 ring-inset ${item.verdict === "passed" ? "bg-emerald-50 text-emerald-800 ring-emerald-200" : "bg-red-50 text-red-800 ring-red-200"}`}
          >
            {item.verdict}
          </span>
        ) : (
          <span className="text-zinc-400">—</span>
        )}
      </td>
      <td className={td}>
        <StatusBadge status={item.status} />
      </td>
      <td
        className={`${td} text-right whitespace-nowrap tabular-nums`}
        title={`${formatTokens(item.usage.input_tokens)} in · ${formatTokens(item.usage.output_tokens)} out`}
      >
        {formatUsd(item.cost_usd)}
      </td>
      <td className={`${td} text-right whitespace-nowrap tabular-nums`}>{formatDuration(duration)}</td>
    </tr>
  );
});
