"use client";

import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { formatTokens, formatUsd } from "@/lib/format";
import { updateBudget } from "./api";
import { batchKeys } from "./panel-state";
import { errorMessage } from "./shared";
import { buttonClasses } from "@/components/ui/button";
import { fieldClass, labelClass } from "@/components/ui/field";
import { Spinner } from "@/components/ui/spinner";
import { budgetUsage } from "./waiting";

/** A batch's budget: the line in the panel, the form that raises it, and the New batch dialog's inputs. */

/** Budget line with a raise form when the batch is paused at its budget. */
export function BudgetSection({ threadId, batch }: { threadId: string; batch: BatchProjection }) {
  const has = batch.budget.max_total_tokens !== null || batch.budget.max_cost_usd !== null;
  const [open, setOpen] = useState(false);
  return (
    <div data-testid="batch-budget" className="flex flex-wrap items-center gap-x-3 gap-y-1 text-xs text-zinc-600">
      <span className="tabular-nums">
        Cost <span className="font-medium text-zinc-800">{formatUsd(batch.cost_usd)}</span>
      </span>
      {has ? (
        <span className="tabular-nums">
          Budget <span className="font-medium text-zinc-800">{budgetUsage(batch)}</span>
        </span>
      ) : (
        <span>No budget</span>
      )}
      {batch.pause_reason === "budget" && !open ? (
        <button type="button" onClick={() => setOpen(true)} className={buttonClasses("secondary", "sm")}>
          Raise budget
        </button>
      ) : null}
      {open ? <RaiseBudgetForm threadId={threadId} batch={batch} onDone={() => setOpen(false)} /> : null}
    </div>
  );
}

const doubled = (n: number | null) => (n === null ? "" : String(n * 2));

function RaiseBudgetForm({ threadId, batch, onDone }: { threadId: string; batch: BatchProjection; onDone: () => void }) {
  const qc = useQueryClient();
  const [tokens, setTokens] = useState(doubled(batch.budget.max_total_tokens));
  const [cost, setCost] = useState(doubled(batch.budget.max_cost_usd));
  const [error, setError] = useState<string | null>(null);
  const save = useMutation({
    mutationFn: () =>
      updateBudget(threadId, batch.id, {
        ...(tokens.trim() !== "" ? { max_total_tokens: Number(tokens) } : {}),
        ...(cost.trim() !== "" ? { max_cost_usd: Number(cost) } : {}),
      }),
    onSuccess: (fresh) => {
      qc.setQueryData<BatchProjection[]>(batchKeys.list(threadId), (list) => list?.map((b) => (b.id === fresh.id ? fresh : b)));
      onDone();
    },
    onError: (err) => setError(errorMessage(err)),
  });
  return (
    <form
      className="flex w-full flex-col gap-2"
      onSubmit={(e) => {
        e.preventDefault();
        setError(null);
        save.mutate();
      }}
    >
      <BudgetInputs
        tokens={tokens}
        cost={cost}
        onTokens={setTokens}
        onCost={setCost}
        only={{ tokens: batch.budget.max_total_tokens !== null, cost: batch.budget.max_cost_usd !== null }}
      />
      <div className="flex gap-2">
        <button type="submit" disabled={save.isPending} className={buttonClasses("secondary", "sm")}>
          {save.isPending ? <Spinner /> : null}
          Save budget
        </button>
        <button type="button" onClick={onDone} className={buttonClasses("secondary", "sm")}>
          Cancel
        </button>
      </div>
      {error ? (
        <p role="alert" className="text-red-700">
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

/** The two budget inputs; `only` leaves out the ones a batch does not have (the raise form). */
export function BudgetInputs({
  tokens,
  cost,
  onTokens,
  onCost,
  only = { tokens: true, cost: true },
  placeholder,
}: {
  tokens: string;
  cost: string;
  onTokens: (v: string) => void;
  onCost: (v: string) => void;
  only?: { tokens: boolean; cost: boolean };
  placeholder?: string;
}) {
  const ids = { tokens: useId(), cost: useId() };
  const fields = [
    { show: only.tokens, id: ids.tokens, label: "Max total tokens (budget)", value: tokens, onChange: onTokens, min: 1, step: "1" },
    { show: only.cost, id: ids.cost, label: "Max cost in USD (budget)", value: cost, onChange: onCost, min: 0, step: "any" },
  ];
  return (
    <div className="grid grid-cols-1 gap-2 sm:grid-cols-2">
      {fields
        .filter((f) => f.show)
        .map(({ show: _, ...f }) => (
          <NumberField key={f.id} {...f} placeholder={placeholder} />
        ))}
    </div>
  );
}

/** A labelled number input of the panel's forms. */
export function NumberField({
  id,
  label,
  value,
  onChange,
  min,
  max,
  step = "1",
  placeholder,
  hint,
}: {
  id: string;
  label: string;
  value: string;
  onChange: (v: string) => void;
  min: number;
  max?: number;
  step?: string;
  placeholder?: string;
  /** A line under the field, which the field is described by. */
  hint?: string;
}) {
  const hintId = `${id}-hint`;
  return (
    <div className="flex flex-col gap-1">
      <label htmlFor={id} className={labelClass}>
        {label}
      </label>
      <input
        id={id}
        type="number"
        min={min}
        max={max}
        step={step}
        inputMode={step === "1" ? "numeric" : "decimal"}
        value={value}
        onChange={(e) => onChange(e.target.value)}
        placeholder={placeholder}
        aria-describedby={hint ? hintId : undefined}
        className={fieldClass}
      />
      {hint ? (
        <p id={hintId} className="text-xs text-zinc-500">
          {hint}
        </p>
      ) : null}
    </div>
  );
}

/** Tokens used so far, for compact places (the receipt card). */
export function usageShort(b: BatchProjection): string {
  return `${formatTokens(b.usage.input_tokens + b.usage.output_tokens)} tokens · ${formatUsd(b.cost_usd)}`;
}
