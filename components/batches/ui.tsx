"use client";

import type { Verdict } from "@/lib/api/batch-data";
import type { BatchStatus, ItemStatus } from "@/lib/api/batches";
import { cellText } from "@/lib/result-columns";
import { errorMessage } from "./shared";
import { batchStatusText, ITEM_STATES, type OutcomeCounts } from "./status";

/** Small presentational pieces of the batch panel. */

const STATUS_STYLE: Record<BatchStatus | ItemStatus, string> = {
  pending: "bg-zinc-100 text-zinc-700 ring-zinc-300",
  queued: "bg-slate-100 text-slate-800 ring-slate-300",
  leased: "bg-indigo-50 text-indigo-800 ring-indigo-200",
  running: "bg-sky-50 text-sky-800 ring-sky-200",
  awaiting_approval: "bg-amber-50 text-amber-900 ring-amber-300",
  paused: "bg-amber-50 text-amber-900 ring-amber-300",
  succeeded: "bg-emerald-50 text-emerald-800 ring-emerald-200",
  completed: "bg-emerald-50 text-emerald-800 ring-emerald-200",
  failed: "bg-red-50 text-red-800 ring-red-200",
  cancelled: "bg-zinc-200 text-zinc-800 ring-zinc-300",
};

/** A batch's own state word, or an item's plain word ("done", "starting"). */
const itemWords = (status: BatchStatus | ItemStatus) =>
  status in ITEM_STATES ? ITEM_STATES[status as ItemStatus].label.toLowerCase() : status;

const WARN_STYLE = "bg-amber-50 text-amber-900 ring-amber-300";

/**
 * A status pill. With a batch's counts, a finished batch tells its failures: "completed · 2
 * failed" in amber (data-tone="warn") rather than a green "completed".
 */
export function StatusBadge({
  status,
  counts,
  className = "",
}: {
  status: BatchStatus | ItemStatus;
  counts?: OutcomeCounts;
  className?: string;
}) {
  const words = counts && status !== "succeeded" ? batchStatusText(status as BatchStatus, counts) : null;
  const warn = words?.tone === "warn";
  return (
    <span
      data-status={status}
      data-tone={words?.tone}
      className={`inline-flex shrink-0 items-center whitespace-nowrap rounded-full px-2 py-0.5 text-xs font-medium ring-1 ring-inset ${warn ? WARN_STYLE : STATUS_STYLE[status]} ${className}`}
    >
      {status === "running" || status === "leased" ? (
        <span aria-hidden className="mr-1 size-1.5 animate-pulse rounded-full bg-current" />
      ) : null}
      {words?.label ?? itemWords(status)}
    </span>
  );
}

const BAR_COLOR: Partial<Record<BatchStatus | "warn", string>> = {
  warn: "bg-amber-500",
  completed: "bg-emerald-500",
  failed: "bg-red-500",
  cancelled: "bg-zinc-400",
  paused: "bg-amber-500",
};

/** A progress bar for an already-clamped 0..100 value; `label` names it for assistive tech. */
export function ProgressBar({
  value,
  status,
  tone,
  label,
  valueText,
  size = "md",
}: {
  value: number;
  status: BatchStatus;
  /** "warn": a finished batch with failed or cancelled items (amber, not green). */
  tone?: "warn";
  label?: string;
  valueText?: string;
  size?: "sm" | "md";
}) {
  const pct = Math.min(100, Math.max(0, Number.isFinite(value) ? value : 0));
  const track = size === "sm" ? "h-1.5" : "h-2.5";
  const a11y = label
    ? {
        role: "progressbar" as const,
        "aria-label": label,
        "aria-valuemin": 0,
        "aria-valuemax": 100,
        "aria-valuenow": pct,
        "aria-valuetext": valueText,
      }
    : { "aria-hidden": true };
  return (
    <div {...a11y} className={`${track} w-full overflow-hidden rounded-full bg-zinc-200`}>
      <div
        className={`h-full rounded-full transition-[width] duration-500 ease-out ${BAR_COLOR[tone ?? status] ?? "bg-sky-600"}`}
        style={{ width: `${pct}%` }}
      />
    </div>
  );
}

export function shortId(id: string): string {
  return id.slice(0, 8);
}

/** An error under a control or a table, read out when it appears. */
export function ErrorText({ error, className = "" }: { error: unknown; className?: string }) {
  return (
    <p role="alert" className={`text-xs text-red-700 ${className}`}>
      {typeof error === "string" ? error : errorMessage(error)}
    </p>
  );
}

/** An item's verdict (all its checks passed, or one failed) as a pill; a dash before there is one. */
export function VerdictBadge({ verdict }: { verdict: Verdict | null }) {
  if (!verdict) return <span className="text-zinc-400">—</span>;
  return (
    <span
      data-testid="verdict"
      className={`rounded-full px-2 py-0.5 font-medium ring-1 ring-inset ${verdict === "passed" ? "bg-emerald-50 text-emerald-800 ring-emerald-200" : "bg-red-50 text-red-800 ring-red-200"}`}
    >
      {verdict}
    </span>
  );
}

/** An object item's fields as a name: value list, never as the JSON they are stored in. */
export function FieldList({ fields, className, testId }: { fields: Record<string, unknown>; className: string; testId?: string }) {
  return (
    <dl data-testid={testId} className={className}>
      {Object.entries(fields).map(([name, value]) => (
        <div key={name} className="contents">
          <dt className="font-mono text-zinc-500">{name}:</dt>
          <dd className="whitespace-pre-wrap wrap-anywhere">{cellText(value) || "—"}</dd>
        </div>
      ))}
    </dl>
  );
}
