"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { formatCount, formatDuration, formatTokens } from "@/lib/batches-ui";
import { updateBudget } from "./api";
import { errorMessage } from "./shared";
import { buttonClass, Spinner } from "./ui";

/**
 * Closing-the-loop views of a batch: why it waits (in words), the server's ETA from recent
 * completions, and its budget (with a form to raise it). Kept apart from the panel's own files.
 */

const clock = (iso: string | null) =>
  iso ? new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }) : null;
const usd = (n: number) => `$${n < 1 ? n.toFixed(4) : n.toFixed(2)}`;

/** One sentence: "Waiting: …", or null while items move. */
export function waitingText(b: BatchProjection): string | null {
  switch (b.waiting_reason) {
    case "paused":
      return "Waiting: paused — resume to continue.";
    case "budget":
      if (b.pause_reason === "quota") return "Waiting: budget — your daily token quota is used up; resume after 00:00 UTC.";
      return `Waiting: budget — ${budgetUsage(b)}; raise the budget, then resume.`;
    case "no_worker": {
      const since = clock(b.waiting_since);
      return since
        ? `Waiting: no worker has been alive since ${since} — start one with \`npm run worker\`.`
        : "Waiting: no worker is running — start one with `npm run worker`.";
    }
    case "rate_limited":
      return `Waiting: rate limited by the model provider${b.waiting_until ? ` until ${clock(b.waiting_until)}` : ""}.`;
    case "capacity":
      return "Waiting: every worker slot is busy with other work; items start as slots free up.";
    default:
      return null;
  }
}

function budgetUsage(b: BatchProjection): string {
  const parts: string[] = [];
  if (b.budget.max_total_tokens !== null)
    parts.push(`${formatCount(b.budget.used_tokens)} of ${formatCount(b.budget.max_total_tokens)} tokens used`);
  if (b.budget.max_cost_usd !== null) parts.push(`${usd(b.budget.used_cost_usd)} of ${usd(b.budget.max_cost_usd)} spent`);
  return parts.join(", ") || "budget reached";
}

const TONE: Record<string, string> = {
  paused: "bg-amber-50 text-amber-900 ring-amber-200",
  budget: "bg-amber-50 text-amber-900 ring-amber-200",
  no_worker: "bg-red-50 text-red-900 ring-red-200",
  rate_limited: "bg-sky-50 text-sky-900 ring-sky-200",
  capacity: "bg-zinc-50 text-zinc-800 ring-zinc-200",
};

/** The panel's waiting banner. */
export function WaitingNotice({ batch }: { batch: BatchProjection }) {
  const text = waitingText(batch);
  if (!text) return null;
  return (
    <p
      data-testid="batch-waiting"
      data-reason={batch.waiting_reason ?? undefined}
      role="status"
      className={`rounded-md px-2 py-1.5 text-xs ring-1 ring-inset ${TONE[batch.waiting_reason ?? ""] ?? TONE.capacity}`}
    >
      {text}
    </p>
  );
}

/** Throughput and ETA from recent completions; a rate-limited batch shows the limit instead. */
export function etaText(b: BatchProjection): { throughput: string; eta: string } {
  if (b.waiting_reason === "rate_limited")
    return { throughput: "rate limited", eta: b.waiting_until ? `after ${clock(b.waiting_until)}` : "—" };
  if (!b.eta) return { throughput: "—", eta: "—" };
  return {
    throughput: `${b.eta.items_per_minute}/min`,
    eta: formatDuration(b.eta.eta_seconds * 1000),
  };
}

/** Budget line with a raise form when the batch is paused at its budget. */
export function BudgetSection({ threadId, batch }: { threadId: string; batch: BatchProjection }) {
  const has = batch.budget.max_total_tokens !== null || batch.budget.max_cost_usd !== null;
  const atBudget = batch.pause_reason === "budget";
  const [open, setOpen] = useState(false);
  return (
    <div data-testid="batch-budget" className="flex flex-wrap items-center gap-x-3 gap-y-1 text-xs text-zinc-600">
      <span className="tabular-nums">
        Cost <span className="font-medium text-zinc-800">{usd(batch.cost_usd)}</span>
      </span>
      {has ? (
        <span className="tabular-nums">
          Budget <span className="font-medium text-zinc-800">{budgetUsage(batch)}</span>
        </span>
      ) : (
        <span>No budget</span>
      )}
      {atBudget && !open ? (
        <button type="button" onClick={() => setOpen(true)} className={`${buttonClass.base} ${buttonClass.neutral}`}>
          Raise budget
        </button>
      ) : null}
      {open ? <RaiseBudgetForm threadId={threadId} batch={batch} onDone={() => setOpen(false)} /> : null}
    </div>
  );
}

function RaiseBudgetForm({ threadId, batch, onDone }: { threadId: string; batch: BatchProjection; onDone: () => void }) {
  const qc = useQueryClient();
  const ids = { tokens: useId(), cost: useId() };
  const [tokens, setTokens] = useState(batch.budget.max_total_tokens === null ? "" : String(batch.budget.max_total_tokens * 2));
  const [cost, setCost] = useState(batch.budget.max_cost_usd === null ? "" : String(batch.budget.max_cost_usd * 2));
  const [error, setError] = useState<string | null>(null);
  const save = useMutation({
    mutationFn: () =>
      updateBudget(threadId, batch.id, {
        ...(tokens.trim() !== "" ? { max_total_tokens: Number(tokens) } : {}),
        ...(cost.trim() !== "" ? { max_cost_usd: Number(cost) } : {}),
      }),
    onSuccess: (fresh) => {
      qc.setQueryData<BatchProjection[]>(["batches", threadId], (list) => list?.map((b) => (b.id === fresh.id ? fresh : b)));
      onDone();
    },
    onError: (err) => setError(errorMessage(err)),
  });
  return (
    <form
      className="flex w-full flex-wrap items-end gap-2"
      onSubmit={(e) => {
        e.preventDefault();
        setError(null);
        save.mutate();
      }}
    >
      {batch.budget.max_total_tokens !== null ? (
        <label htmlFor={ids.tokens} className="flex flex-col gap-0.5">
          <span className="font-medium text-zinc-700">Max total tokens</span>
          <input
            id={ids.tokens}
            type="number"
            min={1}
            inputMode="numeric"
            value={tokens}
            onChange={(e) => setTokens(e.target.value)}
            className="w-36 rounded-md border border-zinc-300 px-2 py-1 text-sm"
          />
        </label>
      ) : null}
      {batch.budget.max_cost_usd !== null ? (
        <label htmlFor={ids.cost} className="flex flex-col gap-0.5">
          <span className="font-medium text-zinc-700">Max cost (USD)</span>
          <input
            id={ids.cost}
            type="number"
            min={0}
            step="any"
            value={cost}
            onChange={(e) => setCost(e.target.value)}
            className="w-28 rounded-md border border-zinc-300 px-2 py-1 text-sm"
          />
        </label>
      ) : null}
      <button type="submit" disabled={save.isPending} className={`${buttonClass.base} ${buttonClass.neutral}`}>
        {save.isPending ? <Spinner /> : null}
        Save budget
      </button>
      <button type="button" onClick={onDone} className={`${buttonClass.base} ${buttonClass.neutral}`}>
        Cancel
      </button>
      {error ? (
        <p role="alert" className="w-full text-red-700">
          {error}
        </p>
      ) : null}
    </form>
  );
}

/** The New batch dialog's budget inputs; returns the body fields or an error naming the field. */
export function budgetBody(tokens: string, cost: string): { body: { max_total_tokens?: number; max_cost_usd?: number }; error: string | null } {
  const body: { max_total_tokens?: number; max_cost_usd?: number } = {};
  if (tokens.trim() !== "") {
    const n = Number(tokens);
    if (!Number.isInteger(n) || n <= 0) return { body, error: "Max total tokens must be a positive whole number." };
    body.max_total_tokens = n;
  }
  if (cost.trim() !== "") {
    const n = Number(cost);
    if (!Number.isFinite(n) || n <= 0) return { body, error: "Max cost must be a positive number of dollars." };
    body.max_cost_usd = n;
  }
  return { body, error: null };
}

export function BudgetFields({
  tokens,
  cost,
  onTokens,
  onCost,
  inputClass,
  labelClass,
}: {
  tokens: string;
  cost: string;
  onTokens: (v: string) => void;
  onCost: (v: string) => void;
  inputClass: string;
  labelClass: string;
}) {
  const ids = { tokens: useId(), cost: useId() };
  return (
    <div className="grid grid-cols-2 gap-3">
      <div className="flex flex-col gap-1">
        <label htmlFor={ids.tokens} className={labelClass}>
          Max total tokens (budget)
        </label>
        <input
          id={ids.tokens}
          type="number"
          min={1}
          inputMode="numeric"
          value={tokens}
          onChange={(e) => onTokens(e.target.value)}
          placeholder="no limit"
          className={inputClass}
        />
      </div>
      <div className="flex flex-col gap-1">
        <label htmlFor={ids.cost} className={labelClass}>
          Max cost in USD (budget)
        </label>
        <input
          id={ids.cost}
          type="number"
          min={0}
          step="any"
          value={cost}
          onChange={(e) => onCost(e.target.value)}
          placeholder="no limit"
          className={inputClass}
        />
      </div>
      <p className="col-span-2 -mt-1 text-xs text-zinc-500">
        The batch pauses when its items reach the budget; items already running finish, so it can end up to
        max running items × one item over.
      </p>
    </div>
  );
}

/** Tokens used so far, for compact places (the receipt card). */
export function usageShort(b: BatchProjection): string {
  return `${formatTokens(b.usage.input_tokens + b.usage.output_tokens)} tokens · ${usd(b.cost_usd)}`;
}
