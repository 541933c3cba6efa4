"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { buttonClasses } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import type { BatchProjection } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";
import { retryBatchItems } from "./api";
import { type ConfirmHandlers, ConfirmDialog } from "./confirm-cancel";
import { batchKeys } from "./panel-state";
import { NO_WORKER_TITLE } from "./shared";
import { ErrorText } from "./ui";

/**
 * The bulk retries of a batch (POST .../retry): every failed item ("Retry failed (N)", the
 * batch's controls) or every item that failed a check ("Retry failed checks", the Results view).
 * Each asks first, as Cancel does, with the count the panel's polls keep current, and says what
 * it did.
 */

export type BulkRetryKind = "failed" | "failed_checks";

const KINDS: Record<
  BulkRetryKind,
  {
    count: (b: BatchProjection) => number;
    label: (n: number) => string;
    question: (n: number) => string;
    what: string;
    none: string;
    testId: string;
  }
> = {
  failed: {
    count: (b) => b.counts.failed,
    label: (n) => `Retry failed (${formatCount(n)})`,
    question: (n) => (n === 1 ? "Retry the failed item?" : `Retry the ${formatCount(n)} failed items?`),
    what: "run again from the start with fresh attempts; their errors are cleared.",
    none: "No item has failed.",
    testId: "retry-failed",
  },
  failed_checks: {
    count: (b) => b.verdicts.failed,
    label: () => "Retry failed checks",
    question: (n) => (n === 1 ? "Retry the item that failed a check?" : `Retry the ${formatCount(n)} items that failed a check?`),
    what: "run again from the start; their answers, outputs and verdicts are replaced by the new run's.",
    none: "No finished item failed a check.",
    testId: "retry-checks",
  },
};

export function BulkRetry({
  threadId,
  batch,
  workerAlive,
  kind,
  onlyWhenNeeded = false,
}: {
  threadId: string;
  batch: BatchProjection;
  workerAlive: boolean;
  kind: BulkRetryKind;
  /** Shown only while something matches (or to say what the retry did). */
  onlyWhenNeeded?: boolean;
}) {
  const k = KINDS[kind];
  const qc = useQueryClient();
  const [asking, setAsking] = useState(false);
  const retry = useMutation({
    mutationFn: () => retryBatchItems(threadId, batch.id, kind),
    onSettled: () => {
      void qc.invalidateQueries({ queryKey: batchKeys.list(threadId) });
      void qc.invalidateQueries({ queryKey: batchKeys.batch(threadId, batch.id) });
      void qc.invalidateQueries({ queryKey: batchKeys.items(threadId, batch.id) });
    },
  });
  const n = k.count(batch);
  const cancelled = batch.status === "cancelled";
  const canRetry = workerAlive && !cancelled && n > 0 && !retry.isPending;
  if (onlyWhenNeeded && n === 0 && retry.isIdle && !asking) return null;
  const title = !workerAlive ? NO_WORKER_TITLE : cancelled ? "A cancelled batch cannot be retried." : n === 0 ? k.none : undefined;
  return (
    <>
      <span title={title}>
        <button
          type="button"
          disabled={!canRetry}
          aria-busy={retry.isPending || undefined}
          onClick={() => {
            retry.reset();
            setAsking(true);
          }}
          className={buttonClasses("secondary", "sm")}
        >
          {retry.isPending ? <Spinner /> : null}
          {k.label(n)}
        </button>
      </span>
      <p role="status" data-testid={`${k.testId}-feedback`} className="order-last basis-full text-xs text-zinc-700 empty:hidden">
        {retry.isSuccess
          ? retry.data.retried === 0
            ? "No items needed a retry."
            : `Retried ${formatCount(retry.data.retried)} ${retry.data.retried === 1 ? "item" : "items"}.`
          : ""}
      </p>
      {retry.isError ? <ErrorText error={retry.error} className="order-last basis-full" /> : null}
      {asking ? (
        <ConfirmBulkRetry
          batch={batch}
          kind={kind}
          onClose={() => setAsking(false)}
          onConfirm={() => {
            setAsking(false);
            retry.mutate();
          }}
        />
      ) : null}
    </>
  );
}

/** The question, with the count as the page last polled it (the panel's list, or the full-width page's batch). */
function ConfirmBulkRetry({ batch, kind, onConfirm, onClose }: { batch: BatchProjection; kind: BulkRetryKind } & ConfirmHandlers) {
  const k = KINDS[kind];
  const n = k.count(batch);
  const finished = batch.status === "completed" || batch.status === "failed";
  return (
    <ConfirmDialog
      title={n > 0 ? k.question(n) : "Nothing to retry"}
      testId={`${k.testId}-confirm`}
      keepLabel="Keep as is"
      confirmLabel={n > 0 ? `Retry ${formatCount(n)}` : "Retry"}
      disabled={n === 0 || batch.status === "cancelled"}
      onConfirm={onConfirm}
      onClose={onClose}
    >
      {n === 0
        ? `${k.none} There is nothing to retry now.`
        : `${n === 1 ? "It will" : `All ${formatCount(n)} will`} ${k.what}${finished ? " The batch reopens; its elapsed time and throughput count from the retry." : ""}`}
    </ConfirmDialog>
  );
}
