"use client";

import { useQueryClient } from "@tanstack/react-query";
import type { DynamicToolUIPart, ToolUIPart } from "ai";
import { useEffect } from "react";
import { formatCount } from "@/lib/format";
import { usageShort } from "./budget";
import { announceBatch, batchHash, useBatchPanelRequests, useLiveBatch } from "./panel-state";
import { barProgress, batchStatusText, progressSplit } from "./status";
import { ProgressBar, StatusBadge, shortId } from "./ui";
import { Spinner } from "@/components/ui/spinner";
import { approvalWaitingText, waitingText } from "./waiting";

/** The `tool-batch_task` part of a chat message (an AI SDK tool UI part). */
export type BatchToolPart = ToolUIPart | DynamicToolUIPart;

export interface Receipt {
  batchId: string | null;
  total: number | null;
  message: string | null;
}

const rec = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const str = (v: unknown): string | null => (typeof v === "string" && v !== "" ? v : null);

/** Reads the receipt from the tool's output (flat or under `batch`), the count from the input as a fallback. */
export function readReceipt(part: { input?: unknown; output?: unknown }): Receipt {
  const out = rec(part.output);
  const nested = rec(out?.batch);
  const pick = (k: string) => out?.[k] ?? nested?.[k];
  const inputItems = rec(part.input)?.items;
  return {
    batchId: str(out?.batch_id) ?? str(nested?.id) ?? str(out?.id),
    total:
      num(pick("total")) ??
      num(pick("item_count")) ??
      num(pick("items")) ??
      (Array.isArray(inputItems) ? inputItems.length : null),
    message: str(out?.error) ?? str(out?.message),
  };
}

/** A compact receipt in the transcript when the agent submits a batch; links to it in the panel. */
export function BatchReceiptCard({ part, threadId }: { part: BatchToolPart; threadId: string }) {
  const receipt = readReceipt(part);
  const done = part.state === "output-available";
  return (
    <ReceiptView
      receipt={receipt}
      threadId={threadId}
      done={done}
      failed={part.state === "output-error" || (done && !receipt.batchId)}
      errorText={part.state === "output-error" ? part.errorText : undefined}
    />
  );
}

/** The receipt of a batch the person submitted outside the chat (the New batch dialog): stored with the thread's messages. */
export function SubmittedBatchCard({ batchId, total, threadId }: { batchId: string; total: number; threadId: string }) {
  return <ReceiptView receipt={{ batchId, total, message: null }} threadId={threadId} done failed={false} />;
}

function ReceiptView({
  receipt,
  threadId,
  done,
  failed,
  errorText,
}: {
  receipt: Receipt;
  threadId: string;
  done: boolean;
  failed: boolean;
  errorText?: string;
}) {
  const qc = useQueryClient();
  const live = useLiveBatch(threadId, receipt.batchId);
  const { focusBatch } = useBatchPanelRequests(threadId);

  useEffect(() => {
    if (receipt.batchId) announceBatch(qc, threadId, receipt.batchId);
  }, [qc, threadId, receipt.batchId]);

  // Only the panel's live poll says the status: the tool output's status is a snapshot from
  // submission, and showing it until the first poll flashed a stale "running" after sign-in.
  const status = live?.status;
  const total = live?.total ?? receipt.total;
  return (
    <div
      data-testid="batch-receipt"
      data-batch-id={receipt.batchId ?? undefined}
      className="my-1 flex max-w-md flex-col gap-1.5 rounded-lg border border-zinc-200 bg-white px-3 py-2 text-sm shadow-xs"
    >
      <div className="flex flex-wrap items-center gap-2">
        <svg aria-hidden viewBox="0 0 16 16" className="size-4 text-sky-700">
          <path d="M2 4h12M2 8h12M2 12h8" fill="none" stroke="currentColor" strokeWidth="1.5" strokeLinecap="round" />
        </svg>
        <span className="font-medium">
          {failed ? "Batch not submitted" : done ? "Batch submitted" : "Submitting batch…"}
        </span>
        {!done && !failed ? <Spinner className="text-zinc-500" /> : null}
        {status ? <StatusBadge status={status} counts={live?.counts} className="ml-auto" /> : null}
      </div>
      {failed ? (
        <p className="text-xs text-red-700">{errorText ?? receipt.message ?? "The batch was not created."}</p>
      ) : (
        <div className="flex flex-wrap items-center gap-x-3 gap-y-1 text-xs text-zinc-600">
          {live ? (
            <span data-testid="receipt-title" className="basis-full font-medium text-zinc-800 wrap-anywhere">
              {live.title}
            </span>
          ) : null}
          {live?.variant_of ? (
            <span data-testid="receipt-variant-of" className="basis-full wrap-anywhere">
              variant of <span className="font-medium text-zinc-800">{live.variant_of_title ?? shortId(live.variant_of)}</span>
            </span>
          ) : null}
          {receipt.batchId ? (
            <span>
              id <span className="font-mono text-zinc-800">{shortId(receipt.batchId)}</span>
            </span>
          ) : null}
          {total !== null ? (
            <span className="tabular-nums">
              {formatCount(total)} {total === 1 ? "item" : "items"}
            </span>
          ) : null}
          {live ? (
            <span data-testid="receipt-progress" className="tabular-nums">
              {progressSplit(live.total, live.counts)}
            </span>
          ) : null}
          {receipt.batchId ? (
            <a
              href={batchHash(receipt.batchId)}
              onClick={() => focusBatch(receipt.batchId!)}
              className="ml-auto font-medium text-sky-800 underline underline-offset-2 hover:text-sky-900 focus-visible:outline-2 focus-visible:outline-sky-600"
            >
              View in batch panel
            </a>
          ) : null}
        </div>
      )}
      {live ? (
        <ProgressBar
          value={barProgress(live)}
          status={live.status}
          tone={batchStatusText(live.status, live.counts).tone === "warn" ? "warn" : undefined}
          size="sm"
        />
      ) : null}
      {live && waitingText(live) ? (
        <p data-testid="receipt-waiting" className="text-xs text-amber-900">
          {waitingText(live)}
        </p>
      ) : null}
      {live && approvalWaitingText(live) ? (
        <p data-testid="receipt-approval" className="text-xs text-amber-900">
          {approvalWaitingText(live)}
        </p>
      ) : null}
      {live && live.usage.input_tokens + live.usage.output_tokens > 0 ? (
        <p className="text-xs text-zinc-500 tabular-nums">{usageShort(live)}</p>
      ) : null}
    </div>
  );
}
