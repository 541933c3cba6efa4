"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useState } from "react";
import { type BatchProjection, itemStatusSchema } from "@/lib/api/batches";
import { ApiError } from "@/lib/api/client";
import { formatCount, formatDuration, formatTime, formatUsage } from "@/lib/format";
import { BatchArtifacts } from "../files/batch-artifacts";
import { type BatchAction, controlBatch } from "./api";
import { ItemsSection } from "./items";
import { producesData, ResultsSection } from "./results";
import { BudgetSection } from "./budget";
import { LaneSection } from "./lane";
import { concurrencyText, etaText, WaitingNotice } from "./waiting";
import { WaitingApprovals } from "./approvals";
import { BatchMenu } from "./batch-menu";
import { BulkRetry } from "./bulk-retry";
import { ConfirmCancel } from "./confirm-cancel";
import { batchKeys } from "./panel-state";
import { errorMessage, NO_WORKER_TITLE } from "./shared";
import {
  allowedControls,
  barProgress,
  batchStatusText,
  ITEM_STATES,
  isActiveBatch,
  optimisticStatus,
  progressSplit,
} from "./status";
import { batchElapsed } from "./timing";
import { ProgressBar, StatusBadge, shortId } from "./ui";
import { buttonClasses } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";

function useNow(intervalMs: number | null): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    setNow(Date.now());
    if (!intervalMs) return;
    const t = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(t);
  }, [intervalMs]);
  return now;
}


/** The total, then each item state's count in the words the Status filter and the rows use (what each means on hover). */
const COUNT_CELLS = [
  { key: "total", label: "Total", title: "Items in this batch", value: (b: BatchProjection) => b.total },
  ...itemStatusSchema.options.map((s) => ({ key: s, ...ITEM_STATES[s], value: (b: BatchProjection) => b.counts[s] })),
];

const CONTROLS: { action: BatchAction; label: string; danger?: boolean }[] = [
  { action: "pause", label: "Pause" },
  { action: "resume", label: "Resume" },
  { action: "cancel", label: "Cancel", danger: true },
];

/** Overview, controls and items of one batch. */
export function BatchDetail({
  threadId,
  batch,
  workerAlive,
}: {
  threadId: string;
  batch: BatchProjection;
  workerAlive: boolean;
}) {
  const qc = useQueryClient();
  const listKey = batchKeys.list(threadId);
  const headingId = useId();
  const now = useNow(isActiveBatch(batch.status) ? 1_000 : null);
  const [error, setError] = useState<string | null>(null);
  const [confirming, setConfirming] = useState(false);

  const control = useMutation({
    mutationFn: (action: BatchAction) => controlBatch(threadId, batch.id, action),
    onMutate: async (action) => {
      setError(null);
      // Stop an in-flight poll from overwriting the optimistic state with an older one.
      await qc.cancelQueries({ queryKey: listKey });
      const previous = qc.getQueryData<BatchProjection[]>(listKey);
      qc.setQueryData<BatchProjection[]>(listKey, (list) =>
        list?.map((b) => (b.id === batch.id ? optimisticStatus(action, b) : b)),
      );
      return { previous };
    },
    onError: (err, _action, ctx) => {
      if (ctx?.previous) qc.setQueryData(listKey, ctx.previous);
      setError(errorMessage(err));
      if (err instanceof ApiError && err.status === 503) void qc.invalidateQueries({ queryKey: batchKeys.features });
    },
    onSuccess: (fresh) => {
      qc.setQueryData<BatchProjection[]>(listKey, (list) => list?.map((b) => (b.id === fresh.id ? fresh : b)));
    },
    onSettled: () => qc.invalidateQueries({ queryKey: listKey }),
  });

  const allowed = allowedControls(batch.status, workerAlive);
  const busy = control.isPending;
  const pct = barProgress(batch);
  const cancelled = batch.status === "cancelled";
  const elapsed = batchElapsed(batch, now);
  const concurrency = concurrencyText(batch);
  const c = batch.counts;
  const words = batchStatusText(batch.status, c);
  const disabledTitle = workerAlive ? undefined : NO_WORKER_TITLE;

  return (
    <section
      id={`batch-detail-${batch.id}`}
      tabIndex={-1}
      aria-labelledby={headingId}
      data-testid="batch-detail"
      data-batch-id={batch.id}
      data-status={batch.status}
      className="flex min-w-0 flex-col gap-3 px-3 py-3 outline-none"
    >
      <div className="flex flex-wrap items-center gap-x-2 gap-y-1">
        <h3 id={headingId} data-testid="batch-title" className="min-w-0 font-semibold wrap-anywhere">
          {batch.title} <span className="font-mono text-xs font-normal text-zinc-500">{shortId(batch.id)}</span>
        </h3>
        <StatusBadge status={batch.status} counts={c} />
        <span className="text-xs text-zinc-600">
          sub-agent <span className="font-medium text-zinc-800">{batch.subagent}</span>
        </span>
        {/* The chat's header names the lead's model; a batch runs on its sub-agent's. */}
        <span data-testid="batch-model" className="text-xs text-zinc-600">
          model <span className="font-medium text-zinc-800">{batch.model}</span>
        </span>
        {batch.variant_of ? (
          <span data-testid="batch-variant-of" className="text-xs text-zinc-600">
            variant of <span className="font-medium text-zinc-800">{batch.variant_of_title ?? shortId(batch.variant_of)}</span>
          </span>
        ) : null}
        <span data-testid="batch-lane-badge" className="text-xs text-zinc-600">
          lane <span className="font-medium text-zinc-800">{batch.lane === "provider_batch" ? "provider batch" : "live"}</span>
        </span>
        <span className="ml-auto text-xs text-zinc-500 tabular-nums" title={`Created ${batch.created_at}`}>
          created {formatTime(batch.created_at, now)}
        </span>
      </div>

      <div className="flex items-center gap-3">
        <ProgressBar
          value={pct}
          status={batch.status}
          tone={words.tone === "warn" ? "warn" : undefined}
          label="Batch progress"
          valueText={`${pct}% ${cancelled ? "ran before the cancel" : "finished"}: ${progressSplit(batch.total, c)}`}
        />
        <span data-testid="progress-pct" className="min-w-12 shrink-0 text-right font-medium whitespace-nowrap tabular-nums">
          {cancelled ? `${pct}% ran` : `${pct}%`}
        </span>
      </div>
      <p data-testid="progress-text" className="-mt-2 text-xs text-zinc-600 tabular-nums">
        {progressSplit(batch.total, c)}
      </p>

      <dl className="grid grid-cols-3 gap-px overflow-hidden rounded-md border border-zinc-200 bg-zinc-200 @2xl:grid-cols-9">
        {COUNT_CELLS.map((cell) => {
          const n = cell.value(batch);
          return (
            <div key={cell.key} title={cell.title} className="flex cursor-help flex-col bg-white px-2 py-1">
              <dt className="text-[11px] font-medium tracking-wide text-zinc-500">{cell.label}</dt>
              <dd
                data-testid={`count-${cell.key}`}
                className={`text-base font-semibold tabular-nums ${cell.key === "failed" && n > 0 ? "text-red-700" : n === 0 ? "text-zinc-400" : "text-zinc-900"}`}
              >
                {formatCount(n)}
              </dd>
            </div>
          );
        })}
      </dl>

      <dl className="grid grid-cols-2 gap-x-4 gap-y-1 text-xs @2xl:grid-cols-4">
        <Stat label="Tokens" testId="stat-tokens">
          {formatUsage(batch.usage)}
        </Stat>
        <Stat
          label="Elapsed"
          testId="stat-elapsed"
          title={elapsed.sinceRetry && batch.reopened_at ? `Since the retry at ${formatTime(batch.reopened_at, now)}: the time the batch sat finished before it is not counted` : undefined}
        >
          {formatDuration(elapsed.elapsedMs)}
          {elapsed.sinceRetry ? " since retry" : ""}
        </Stat>
        <Stat label="Throughput" testId="stat-throughput">
          {etaText(batch).throughput}
        </Stat>
        <Stat label="ETA" testId="stat-eta">
          {etaText(batch).eta}
        </Stat>
      </dl>

      <WaitingApprovals threadId={threadId} batch={batch} />
      <WaitingNotice batch={batch} />
      <LaneSection batch={batch} />
      <BudgetSection threadId={threadId} batch={batch} />

      {concurrency ? (
        <p data-testid="batch-concurrency" className="text-xs text-zinc-700">
          {concurrency}
        </p>
      ) : null}
      <p data-testid="batch-limits" className="-mt-1 text-xs text-zinc-500 tabular-nums">
        Up to {formatCount(batch.max_live_items)} live · {formatCount(batch.max_running_items)} running ·{" "}
        {batch.max_attempts} {batch.max_attempts === 1 ? "attempt" : "attempts"} per item
      </p>

      <div className="flex flex-wrap items-center gap-1.5">
        <fieldset
          aria-label="Batch controls"
          title={disabledTitle}
          aria-busy={busy}
          className="flex min-w-0 flex-wrap items-center gap-1.5"
        >
          {CONTROLS.map(({ action, label, danger }) => (
            <ControlButton
              key={action}
              label={label}
              danger={danger}
              enabled={allowed[action] && !busy}
              pending={busy && control.variables === action}
              title={disabledTitle}
              // Cancel asks first.
              onClick={() => (action === "cancel" ? setConfirming(true) : control.mutate(action))}
            />
          ))}
        </fieldset>
        <BulkRetry threadId={threadId} batch={batch} workerAlive={workerAlive} kind="failed" onlyWhenNeeded />
      </div>

      <BatchMenu threadId={threadId} batch={batch} workerAlive={workerAlive} />

      {error ? (
        <p role="alert" className="rounded-md bg-red-50 px-2 py-1.5 text-xs text-red-800 ring-1 ring-red-200 ring-inset">
          {error}
        </p>
      ) : null}

      <BatchArtifacts threadId={threadId} batch={batch} />

      <BatchViews threadId={threadId} batch={batch} workerAlive={workerAlive} />

      {confirming ? (
        <ConfirmCancel
          threadId={threadId}
          batchId={batch.id}
          onClose={() => setConfirming(false)}
          onConfirm={() => {
            setConfirming(false);
            control.mutate("cancel");
          }}
        />
      ) : null}
    </section>
  );
}

type View = "items" | "results";
const VIEWS: { view: View; label: string }[] = [
  { view: "items", label: "Items" },
  { view: "results", label: "Results" },
];

/** The batch's items two ways: "Items" (each item, its transcript and Retry) and "Results" (a table of fields, checks and verdicts). */
function BatchViews({ threadId, batch, workerAlive }: { threadId: string; batch: BatchProjection; workerAlive: boolean }) {
  const [view, setView] = useState<View>(() => (producesData(batch) ? "results" : "items"));
  const base = useId();
  const tabId = (v: View) => `${base}-tab-${v}`;
  const onKeyDown = (e: React.KeyboardEvent) => {
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    const next = view === "items" ? "results" : "items";
    setView(next);
    document.getElementById(tabId(next))?.focus();
  };
  return (
    <div className="flex min-w-0 flex-col gap-2 border-t border-zinc-200 pt-3">
      <div role="tablist" aria-label="Batch views" className="flex w-fit gap-1 rounded-md bg-zinc-100 p-1">
        {VIEWS.map(({ view: v, label }) => (
          <button
            key={v}
            id={tabId(v)}
            type="button"
            role="tab"
            aria-selected={view === v}
            aria-controls={`${base}-panel`}
            tabIndex={view === v ? 0 : -1}
            onClick={() => setView(v)}
            onKeyDown={onKeyDown}
            className={`rounded px-2.5 py-1 text-xs font-medium focus-visible:outline-2 focus-visible:outline-sky-600 ${view === v ? "bg-white text-zinc-900 shadow-xs" : "text-zinc-600 hover:text-zinc-900"}`}
          >
            {label}
          </button>
        ))}
      </div>
      <div id={`${base}-panel`} role="tabpanel" aria-labelledby={tabId(view)} className="min-w-0">
        {view === "items" ? (
          <ItemsSection threadId={threadId} batch={batch} workerAlive={workerAlive} />
        ) : (
          <ResultsSection threadId={threadId} batch={batch} workerAlive={workerAlive} />
        )}
      </div>
    </div>
  );
}

function Stat({ label, testId, title, children }: { label: string; testId: string; title?: string; children: React.ReactNode }) {
  return (
    <div title={title} className="flex min-w-0 items-baseline gap-1.5">
      <dt className="text-zinc-500">{label}</dt>
      <dd data-testid={testId} className="truncate font-medium text-zinc-800 tabular-nums">
        {children}
      </dd>
    </div>
  );
}

function ControlButton({
  label,
  enabled,
  pending,
  danger,
  title,
  onClick,
}: {
  label: string;
  enabled: boolean;
  pending: boolean;
  danger?: boolean;
  title?: string;
  onClick: () => void;
}) {
  return (
    <button
      type="button"
      disabled={!enabled}
      title={title}
      aria-busy={pending || undefined}
      onClick={onClick}
      className={buttonClasses(danger ? "danger" : "secondary", "sm", "min-w-16")}
    >
      {pending ? <Spinner /> : null}
      {label}
    </button>
  );
}
