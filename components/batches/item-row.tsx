"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { memo, useId, useState } from "react";
import { PENDING_REVIEWS_KEY, requestReview } from "@/components/review/api";
import { ItemToolCalls } from "@/components/tool-calls";
import type { BatchStatus, ItemProjection } from "@/lib/api/batches";
import { formatTime, formatUsage } from "@/lib/format";
import { cellText, inputFields } from "@/lib/result-columns";
import { CheckList } from "./check-mark";
import { type PageChain, replaceItem } from "./item-pages";
import { batchKeys } from "./panel-state";
import { RetryInputEditor } from "./retry-input-editor";
import { errorMessage, NO_WORKER_TITLE } from "./shared";
import { canRetryItem, ITEM_STATES } from "./status";
import { ErrorText, FieldList, StatusBadge, VerdictBadge } from "./ui";
import { useRetryItem } from "./use-retry-item";
import { buttonClasses } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";

/**
 * What names an item on its row: what was submitted for it. The key shows too only when the
 * submitter chose it (an automatic `item-<position>` repeats the # column).
 */
function itemNames(item: ItemProjection): { label: string; isInput: boolean; key: string | null } {
  const automatic = item.item_key === `item-${item.position}`;
  const key = automatic || item.item_key === item.input ? null : item.item_key;
  const fields = inputFields(item.input);
  // An object item (a CSV row) reads as its fields, not as the JSON they are stored as.
  const label = fields ? Object.entries(fields).map(([name, value]) => `${name}: ${cellText(value)}`).join(" · ") : item.input;
  return item.input ? { label, isInput: true, key } : { label: item.item_key, isInput: false, key: null };
}

/** An item's input in its detail: an object item's fields as a name: value list, else the text. */
function InputDetail({ input, block }: { input: string; block: string }) {
  const fields = inputFields(input);
  if (fields)
    return (
      <FieldList
        fields={fields}
        testId="item-detail-input"
        className={`${block} grid grid-cols-[auto_1fr] gap-x-3 gap-y-1 border-zinc-200 text-zinc-800`}
      />
    );
  return (
    <pre data-testid="item-detail-input" className={`${block} border-zinc-200 text-zinc-800`}>
      {input || "—"}
      {input.length >= 200 ? <span className="text-zinc-400"> (first 200 characters; the JSONL has it all)</span> : null}
    </pre>
  );
}

/**
 * One item on two lines: what it is and how it ended (its result, or its error), its status
 * and attempts, and Retry for a failed one. The row opens to the whole input, result, error
 * and tool calls, wrapped to the panel's width.
 */
export const ItemRow = memo(function ItemRow({
  item,
  threadId,
  batchId,
  batchStatus,
  workerAlive,
  maxAttempts,
  columns,
}: {
  item: ItemProjection;
  threadId: string;
  batchId: string;
  batchStatus: BatchStatus;
  workerAlive: boolean;
  maxAttempts: number;
  /** The table's column count (the Retry column is there only while a loaded item can use it). */
  columns: number;
}) {
  const [open, setOpen] = useState(false);
  const detailId = useId();
  const names = itemNames(item);

  const retry = useRetryItem(threadId, batchId, item.id, () => setOpen(true));
  const canRetry = canRetryItem(item.status, batchStatus, workerAlive) && !retry.isPending;

  return (
    <>
      <tr data-testid="item-row" data-item-key={item.item_key} data-status={item.status} className="border-t border-zinc-100 align-top">
        <td className="px-2 py-1.5 text-right text-zinc-500 tabular-nums">{item.position}</td>
        <td className="min-w-0 px-2 py-1.5">
          <button
            type="button"
            aria-expanded={open}
            aria-controls={detailId}
            onClick={() => setOpen((o) => !o)}
            title={names.label}
            className="flex max-w-full items-center gap-1 rounded text-left text-zinc-900 focus-visible:outline-2 focus-visible:outline-sky-600"
          >
            <svg aria-hidden viewBox="0 0 16 16" className={`size-3 shrink-0 transition-transform ${open ? "" : "-rotate-90"}`}>
              <path d="M4 6l4 4 4-4" fill="none" stroke="currentColor" strokeWidth="1.75" />
            </svg>
            <span data-testid={names.isInput ? "item-input" : "item-key"} className={`truncate ${names.isInput ? "" : "font-mono"}`}>
              {names.label}
            </span>
          </button>
          <p className="mt-0.5 line-clamp-2 pl-4 wrap-anywhere">
            {names.key ? <span className="font-mono text-zinc-500">{names.key} · </span> : null}
            <ResultLine item={item} retried={retry.isSuccess} />
          </p>
        </td>
        <td className="px-2 py-1.5">
          <StatusBadge status={item.status} />
          <span className="mt-1 block text-[11px] text-zinc-500 tabular-nums">
            <span data-testid="item-attempts">
              {item.attempts}/{maxAttempts}
            </span>{" "}
            attempts
          </span>
        </td>
        {columns > 3 ? (
          <td className="px-2 py-1.5 text-right">
            {item.status === "failed" || retry.isPending ? (
              <button
                type="button"
                disabled={!canRetry}
                title={workerAlive ? undefined : NO_WORKER_TITLE}
                aria-busy={retry.isPending || undefined}
                onClick={() => retry.mutate(undefined)}
                className={buttonClasses("secondary", "xs")}
              >
                {retry.isPending ? <Spinner className="size-3" /> : null}
                {retry.isPending ? "Retrying" : "Retry"}
              </button>
            ) : null}
          </td>
        ) : null}
      </tr>
      <tr id={detailId} hidden={!open} className="bg-zinc-50">
        <td colSpan={columns} className="px-3 py-2">
          {open ? (
            <ItemDetail
              item={item}
              maxAttempts={maxAttempts}
              retryError={retry.isError ? errorMessage(retry.error) : null}
              threadId={threadId}
              batchId={batchId}
              canRetry={canRetryItem(item.status, batchStatus, workerAlive)}
            />
          ) : null}
        </td>
      </tr>
    </>
  );
});

/** How the item ended, in one line: its error, its result, or where it stands; after a Retry, what became of it. */
function ResultLine({ item, retried }: { item: ItemProjection; retried: boolean }) {
  if (retried && item.status !== "succeeded") {
    const now = item.status === "failed" ? `failed again: ${item.error ?? "no error message"}` : `${ITEM_STATES[item.status].label.toLowerCase()} again`;
    return (
      <span role="status" data-testid="item-retry-feedback" className="text-sky-800">
        Retried · {now}
      </span>
    );
  }
  if (item.error)
    return (
      <span data-testid="item-result" className="text-red-700" title={item.error}>
        {item.error}
      </span>
    );
  if (item.preview)
    return (
      <span data-testid="item-result" className="text-zinc-600" title={item.preview}>
        {item.preview}
      </span>
    );
  return <span className="text-zinc-400">{item.status === "succeeded" ? "empty answer" : "no result yet"}</span>;
}

function ItemDetail({
  item,
  maxAttempts,
  retryError,
  threadId,
  batchId,
  canRetry,
}: {
  item: ItemProjection;
  maxAttempts: number;
  retryError: string | null;
  threadId: string;
  batchId: string;
  /** A worker runs and the batch takes retries (the editor's Retry is disabled otherwise). */
  canRetry: boolean;
}) {
  const block = "mt-0.5 rounded border bg-white p-2 font-sans whitespace-pre-wrap wrap-anywhere";
  return (
    <div data-testid="item-detail" className="flex min-w-0 flex-col gap-2 text-xs">
      {retryError ? (
        <p role="alert" className="text-red-700">
          Retry failed: {retryError}
        </p>
      ) : null}
      <dl className="flex flex-wrap gap-x-4 gap-y-1 text-zinc-600">
        <Fact label="Key" mono>
          {item.item_key}
        </Fact>
        <Fact label="Attempts">
          {item.attempts} of {maxAttempts}
        </Fact>
        <Fact label="Tokens">
          {formatUsage(item.usage)}
        </Fact>
        {item.started_at ? <Fact label="Started">{formatTime(item.started_at)}</Fact> : null}
        {item.finished_at ? <Fact label="Finished">{formatTime(item.finished_at)}</Fact> : null}
      </dl>
      <section>
        <h5 className="font-medium text-zinc-600">Input</h5>
        <InputDetail input={item.input} block={block} />
        {item.status === "failed" ? <RetryInputEditor item={item} threadId={threadId} batchId={batchId} canRetry={canRetry} /> : null}
      </section>
      {item.error ? (
        <section>
          <h5 className="font-medium text-zinc-600">Error</h5>
          <pre data-testid="item-detail-error" className={`${block} border-red-200 text-red-800`}>
            {item.error}
          </pre>
        </section>
      ) : null}
      {item.preview ? (
        <section>
          <h5 className="font-medium text-zinc-600">Result</h5>
          <pre data-testid="item-detail-result" className={`${block} max-h-64 overflow-y-auto border-zinc-200 text-zinc-800`}>
            {item.preview}
          </pre>
        </section>
      ) : item.error ? null : (
        <p className="text-zinc-500">{item.status === "succeeded" ? "The answer was empty." : "No result yet."}</p>
      )}
      {item.checks.length > 0 ? <ItemChecks item={item} /> : null}
      {item.status === "succeeded" || item.status === "failed" ? <ItemReviewAction item={item} threadId={threadId} batchId={batchId} /> : null}
      <ItemToolCalls threadId={threadId} batchId={batchId} itemId={item.id} count={item.tool_calls} finishedAt={item.finished_at} />
    </div>
  );
}

/** The item's verdict and each check's outcome with its reason, in full (the Results table shows them as marks). */
function ItemChecks({ item }: { item: ItemProjection }) {
  return (
    <section data-testid="item-detail-checks">
      <h5 className="flex items-center gap-2 font-medium text-zinc-600">
        Checks <VerdictBadge verdict={item.verdict} />
      </h5>
      <CheckList checks={item.checks} itemTestId="item-detail-check" className="mt-0.5 rounded border border-zinc-200 bg-white p-2" />
    </section>
  );
}

const REVIEW_WORDS = { pending: "Waiting for review", accepted: "Accepted in review", rejected: "Rejected in review" } as const;

/** Where the item stands in review, and "Queue for review" to put it in /review by hand. */
function ItemReviewAction({ item, threadId, batchId }: { item: ItemProjection; threadId: string; batchId: string }) {
  const qc = useQueryClient();
  const queue = useMutation({
    mutationFn: () => requestReview(threadId, batchId, item.id),
    onSuccess: (review) => {
      qc.setQueriesData<PageChain>({ queryKey: batchKeys.items(threadId, batchId) }, (c) => (c ? replaceItem(c, { ...item, review }) : c));
      void qc.invalidateQueries({ queryKey: PENDING_REVIEWS_KEY });
    },
  });
  const state = item.review?.state;
  return (
    <section data-testid="item-review" data-review-state={state ?? "none"} className="flex flex-wrap items-center gap-2">
      <h5 className="font-medium text-zinc-600">Review</h5>
      <span className="text-zinc-800">
        {state ? REVIEW_WORDS[state] : "Not queued"}
        {item.review?.corrected ? " (with a corrected answer)" : ""}
      </span>
      {state === "pending" ? (
        <a href="/review" className="text-zinc-700 underline underline-offset-2">
          Open Review
        </a>
      ) : (
        <button type="button" disabled={queue.isPending} onClick={() => queue.mutate()} className={buttonClasses("secondary", "sm")}>
          {queue.isPending ? <Spinner /> : null}
          {state ? "Queue for review again" : "Queue for review"}
        </button>
      )}
      {queue.isError ? <ErrorText error={queue.error} className="basis-full" /> : null}
    </section>
  );
}

function Fact({ label, mono, children }: { label: string; mono?: boolean; children: React.ReactNode }) {
  return (
    <div className="flex min-w-0 gap-1">
      <dt>{label}</dt>
      <dd className={`font-medium break-all text-zinc-800 tabular-nums ${mono ? "font-mono" : ""}`}>{children}</dd>
    </div>
  );
}
