"use client";

import { memo, useState } from "react";
import type { BatchProjection, ItemProjection } from "@/lib/api/batches";
import { formatCount, formatDuration, formatTokens, formatUsd } from "@/lib/format";
import { cellText, inputFields, itemDurationMs, outputField, type ResultColumns, resultColumns } from "@/lib/result-columns";
import { BatchTable, type ColumnSet } from "./batch-table";
import { BulkRetry } from "./bulk-retry";
import type { CheckResult } from "@/lib/api/batch-data";
import { CheckMark, checkReason } from "./check-mark";
import { Downloads, FilterBar, filterQuery, NO_FILTER, type TableFilter } from "./toolbar";
import { StatusBadge, VerdictBadge } from "./ui";

/** The sticky first column: opaque, with an edge, above the cells that scroll under it. */
const stickyCell = "sticky left-0 z-[1] bg-inherit shadow-[inset_-1px_0_0_var(--color-zinc-200)]";

/** Whether a batch produces data (the panel opens on its Results). */
export function producesData(batch: BatchProjection): boolean {
  return batch.checks.length > 0 || batch.output_fields.length > 0 || batch.input_fields.length > 0;
}

/**
 * The Results view's columns: the item, its input fields, its expected value (while a loaded item
 * has one), the final answer's fields (a person's correction, else the model's) and who gave it,
 * each check, the verdict, the review, status, cost (tokens on hover) and duration.
 */
function resultColumnSet(batch: BatchProjection, layout: ColumnSet["layout"]): ColumnSet {
  const columns = resultColumns(batch);
  return {
    name: "results",
    caption: "Results: one row per item",
    layout,
    empty: "No items match these filters.",
    columns: (items) => {
      // The Expected column shows while a loaded item has an expected value.
      const expected = items.some((item) => item.expected !== null && item.expected !== undefined);
      return {
      span: 1 + Math.max(1, columns.input.length) + (expected ? 1 : 0) + Math.max(1, columns.output.length) + columns.checks.length + 6,
      head: (
        <thead className="text-[11px] text-zinc-600">
          <tr className="bg-zinc-50">
            <Th className={stickyCell}>Item</Th>
            {columns.input.length > 0 ? columns.input.map((f) => <Th key={`in-${f}`}>{f}</Th>) : <Th>Input</Th>}
            {expected ? <Th>Expected</Th> : null}
            {columns.output.length > 0 ? columns.output.map((c) => <Th key={`out-${c.field}`}>{c.header}</Th>) : <Th>Result</Th>}
            <Th>Answer by</Th>
            {columns.checks.map((name) => (
              <Th key={`check-${name}`} className="text-center">
                {name}
              </Th>
            ))}
            <Th>Verdict</Th>
            <Th>Review</Th>
            <Th>Status</Th>
            <Th className="text-right">Cost</Th>
            <Th className="text-right">Duration</Th>
          </tr>
        </thead>
      ),
      row: (item) => <ResultRow key={item.id} item={item} columns={columns} expected={expected} />,
      };
    },
  };
}

/**
 * A batch's results as a table (one row per item), filtered on the server (Status, Verdict),
 * paged with "Load more"; it scrolls sideways inside its own box with the item column kept in
 * view. In the panel it links to the same view on a page of its own, at the screen's width
 * (`page`: that page, which keeps its filters in its address).
 */
export function ResultsSection({
  threadId,
  batch,
  workerAlive,
  page,
}: {
  threadId: string;
  batch: BatchProjection;
  workerAlive: boolean;
  page?: { initialFilter: TableFilter; onFilter: (filter: TableFilter) => void };
}) {
  const [filter, setFilter] = useState<TableFilter>(page?.initialFilter ?? NO_FILTER);
  const changeFilter = (next: TableFilter) => {
    setFilter(next);
    page?.onFilter(next);
  };
  return (
    <div className="flex min-w-0 flex-col gap-2">
      <div className="flex flex-wrap items-center gap-x-3 gap-y-2">
        <FilterBar batch={batch} filter={filter} onChange={changeFilter} verdict />
        <CheckFilter batch={batch} value={filter.check ?? null} onChange={(check) => changeFilter({ ...filter, check })} />
        <SearchBox value={filter.q ?? ""} onSearch={(q) => changeFilter({ ...filter, q: q || null })} />
        {page ? null : (
          <a
            href={fullWidthHref(threadId, batch.id, filter)}
            className="ml-auto inline-flex items-center gap-1 text-xs font-medium text-sky-800 underline underline-offset-2 hover:text-sky-900 focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            <svg aria-hidden viewBox="0 0 16 16" className="size-3.5">
              <path d="M9 2h5v5M14 2L8 8M12 10v4H2V4h4" fill="none" stroke="currentColor" strokeWidth="1.5" />
            </svg>
            Open full width
          </a>
        )}
      </div>
      <CheckSummary batch={batch} />
      <ResultActions threadId={threadId} batch={batch} workerAlive={workerAlive} filter={filter} />
      <BatchTable threadId={threadId} batch={batch} filter={filter} set={resultColumnSet(batch, page ? "fill" : "scroll")} />
    </div>
  );
}

/** "Check": the items one check passed, or failed. */
function CheckFilter({ batch, value, onChange }: { batch: BatchProjection; value: string | null; onChange: (check: string | null) => void }) {
  if (batch.checks.length === 0) return null;
  return (
    <label className="flex items-center gap-1.5">
      <span className="text-xs text-zinc-600">Check</span>
      <select
        aria-label="Check"
        value={value ?? "all"}
        onChange={(e) => onChange(e.target.value === "all" ? null : e.target.value)}
        className="max-w-48 rounded-md border border-zinc-300 bg-white px-2 py-1 text-sm focus-visible:outline-2 focus-visible:outline-sky-600"
      >
        <option value="all">Any</option>
        {batch.checks.flatMap((c) => [
          <option key={`${c.name}:passed`} value={`${c.name}:passed`}>
            {c.name} passed ({formatCount(c.passed)})
          </option>,
          <option key={`${c.name}:failed`} value={`${c.name}:failed`}>
            {c.name} failed ({formatCount(c.failed)})
          </option>,
        ])}
      </select>
    </label>
  );
}

/** "Search": key, input and answer text, sent on Enter (each search reads pages of the batch on the server). */
function SearchBox({ value, onSearch }: { value: string; onSearch: (q: string) => void }) {
  const [text, setText] = useState(value);
  return (
    <form
      onSubmit={(e) => {
        e.preventDefault();
        onSearch(text.trim());
      }}
      className="flex items-center gap-1.5"
    >
      <input
        type="search"
        aria-label="Search results"
        placeholder="Search key, input, answer"
        value={text}
        maxLength={200}
        onChange={(e) => {
          setText(e.target.value);
          if (e.target.value === "") onSearch("");
        }}
        className="w-48 rounded-md border border-zinc-300 bg-white px-2 py-1 text-sm focus-visible:outline-2 focus-visible:outline-sky-600"
      />
    </form>
  );
}

/** The full-width page of a batch's results, opened with the panel's filters. */
function fullWidthHref(threadId: string, batchId: string, filter: TableFilter): string {
  return `/threads/${encodeURIComponent(threadId)}/batches/${encodeURIComponent(batchId)}/results${filterQuery(filter)}`;
}

function Th({ children, className = "" }: { children: React.ReactNode; className?: string }) {
  return (
    <th scope="col" className={`px-2 py-1.5 font-medium whitespace-nowrap ${className}`}>
      {children}
    </th>
  );
}

/** How the batch's items fare: the share that passed every check, then each check's pass rate over the items it judged so far. */
function CheckSummary({ batch }: { batch: BatchProjection }) {
  if (batch.checks.length === 0) return null;
  const judged = batch.verdicts.passed + batch.verdicts.failed;
  return (
    <ul aria-label="Checks" data-testid="check-summary" className="flex flex-wrap gap-1.5 text-xs">
      <li data-testid="overall-pass-rate" className="rounded-full bg-zinc-800 px-2 py-0.5 text-white tabular-nums">
        <span className="font-medium">All checks</span> {formatCount(batch.verdicts.passed)} of {formatCount(judged)} items passed
        {judged > 0 ? ` (${Math.round((100 * batch.verdicts.passed) / judged)}%)` : ""}
      </li>
      {batch.checks.map((c) => (
        <li key={c.name} className="rounded-full bg-zinc-100 px-2 py-0.5 text-zinc-700 tabular-nums">
          <span className="font-medium text-zinc-900">{c.name}</span> {formatCount(c.passed)} of {formatCount(c.passed + c.failed)} passed
          {c.passed + c.failed > 0 ? ` (${Math.round((100 * c.passed) / (c.passed + c.failed))}%)` : ""}
        </li>
      ))}
    </ul>
  );
}

/** "Retry failed checks" (every finished item whose verdict is failed: it asks first) and the downloads. */
function ResultActions({
  threadId,
  batch,
  workerAlive,
  filter,
}: {
  threadId: string;
  batch: BatchProjection;
  workerAlive: boolean;
  filter: TableFilter;
}) {
  return (
    <div className="flex flex-wrap items-center gap-2">
      <BulkRetry threadId={threadId} batch={batch} workerAlive={workerAlive} kind="failed_checks" />
      <Downloads threadId={threadId} batchId={batch.id} filter={filter} />
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

/** A check's mark, and under a failed one its reason, so why it failed reads without a hover. */
function CheckCell({ result }: { result: CheckResult | undefined }) {
  const why = result && !result.passed ? checkReason(result) : "";
  return (
    <>
      <CheckMark result={result} />
      {why ? (
        <div data-testid="check-failure" aria-hidden title={why} className="line-clamp-2 max-w-40 min-w-16 text-left text-[11px] text-red-800 wrap-anywhere">
          {why}
        </div>
      ) : null}
    </>
  );
}

/** An item's review as one word: a decided one with a correction reads "corrected". */
function reviewWord(item: ItemProjection): "pending" | "accepted" | "rejected" | "corrected" | null {
  if (!item.review) return null;
  return item.review.corrected && item.review.state !== "pending" ? "corrected" : item.review.state;
}

const REVIEW_TONE: Record<NonNullable<ReturnType<typeof reviewWord>>, string> = {
  pending: "bg-amber-50 text-amber-900 ring-amber-200",
  accepted: "bg-emerald-50 text-emerald-900 ring-emerald-200",
  rejected: "bg-red-50 text-red-900 ring-red-200",
  corrected: "bg-sky-50 text-sky-900 ring-sky-200",
};

const ResultRow = memo(function ResultRow({ item, columns, expected }: { item: ItemProjection; columns: ResultColumns; expected: boolean }) {
  const fields = columns.input.length > 0 ? inputFields(item.input) : null;
  const duration = itemDurationMs(item);
  // The final answer: the person's correction when there is one, else the model's.
  const corrected = item.reviewed_output !== null && item.reviewed_output !== undefined;
  const answer = corrected ? item.reviewed_output : item.output;
  const answerless = answer === null || answer === undefined;
  const review = reviewWord(item);
  const answerTone = corrected ? "bg-sky-50" : "";
  return (
    <tr
      data-testid="result-row"
      data-item-key={item.item_key}
      data-status={item.status}
      data-verdict={item.verdict ?? ""}
      data-review={review ?? ""}
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
      {expected ? (
        <td className={td} data-testid="result-expected">
          <Text value={cellText(item.expected)} className="text-zinc-700" />
        </td>
      ) : null}
      {!corrected && (item.error || (columns.output.length > 0 && answerless)) ? (
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
          <td key={`out-${c.field}`} className={`${td} ${answerTone}`}>
            <Text value={cellText(outputField(answer, c.field))} />
          </td>
        ))
      ) : (
        <td className={`${td} ${answerTone}`}>
          <Text value={corrected ? cellText(answer) : (item.preview ?? cellText(answer))} />
        </td>
      )}
      <td className={`${td} whitespace-nowrap`} data-testid="answer-by">
        {corrected ? (
          <span title="The answer shown is the person's correction (reviewed_output); the model's is in the item and the exports" className="font-medium text-sky-900">
            person
          </span>
        ) : answerless ? null : (
          <span className="text-zinc-600">model</span>
        )}
      </td>
      {columns.checks.map((name) => (
        <td key={`check-${name}`} className={`${td} text-center`}>
          <CheckCell result={item.checks.find((c) => c.name === name)} />
        </td>
      ))}
      <td className={td}>
        <VerdictBadge verdict={item.verdict} />
      </td>
      <td className={td} data-testid="result-review">
        {review ? (
          <span title={item.review?.note} className={`rounded-full px-1.5 py-0.5 text-[11px] font-medium whitespace-nowrap ring-1 ring-inset ${REVIEW_TONE[review]}`}>
            {review}
          </span>
        ) : null}
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
