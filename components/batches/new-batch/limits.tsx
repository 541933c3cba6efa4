import { useId } from "react";
import type { Features } from "@/lib/api/batches";
import { BudgetInputs, NumberField } from "../budget";

export interface LimitsDraft {
  maxLive: string;
  maxRunning: string;
  maxTokens: string;
  maxCost: string;
}

/** The workers' capacity beside Max running items: the limit that holds when it is lower. */
function workersHint(w: Features["worker_runtime"]): string {
  if (!w.alive) return "No worker is running now: items start once one is.";
  return `The workers have ${w.slots} ${w.slots === 1 ? "slot" : "slots"} now (subagent_runtime.max_running each), shared by every batch: no more run at once.`;
}

/** "Limits and budget": how many items may be live and running at once, and the batch's budget. */
export function LimitsSection({
  limits,
  draft,
  onChange,
  runningOnly = false,
  workers,
}: {
  limits: Features["batches"] | undefined;
  /** The live workers now: their slots in all bound how many items run at once, whatever the field says. */
  workers: Features["worker_runtime"] | undefined;
  draft: LimitsDraft;
  onChange: (next: Partial<LimitsDraft>) => void;
  /** A variant: only max running items is its own (live items and the budget are its original's). */
  runningOnly?: boolean;
}) {
  const ids = { live: useId(), running: useId() };
  const fields = [
    { id: ids.live, label: "Max live items", key: "maxLive", max: limits?.max_live_items_per_batch, default: limits?.default_max_live_items },
    {
      id: ids.running,
      label: "Max running items",
      key: "maxRunning",
      max: limits?.max_running_items_per_batch,
      default: limits?.default_max_running_items,
      hint: workers ? workersHint(workers) : undefined,
    },
  ] as const;
  const field = (f: (typeof fields)[number]) => (
    <NumberField
      key={f.id}
      id={f.id}
      label={f.label}
      min={1}
      max={f.max}
      value={draft[f.key]}
      onChange={(v) => onChange({ [f.key]: v })}
      placeholder={f.default !== undefined ? `default ${f.default}` : ""}
      hint={"hint" in f ? f.hint : undefined}
    />
  );
  return (
    <details className="rounded-md border border-zinc-200 px-2 py-1">
      <summary className="cursor-pointer text-xs font-medium text-zinc-700">{runningOnly ? "Limits" : "Limits and budget"}</summary>
      <div className="grid grid-cols-1 gap-2 py-2 sm:grid-cols-2">{runningOnly ? field(fields[1]) : fields.map(field)}</div>
      {runningOnly ? (
        <p className="mb-1 text-xs text-zinc-500">Max live items and the budget are the original batch&apos;s.</p>
      ) : (
        <>
          <BudgetInputs
            tokens={draft.maxTokens}
            cost={draft.maxCost}
            onTokens={(maxTokens) => onChange({ maxTokens })}
            onCost={(maxCost) => onChange({ maxCost })}
            placeholder="no limit"
          />
          <p className="mt-2 mb-1 text-xs text-zinc-500">
            The batch pauses when its items reach the budget; items already running finish, so it can end up to max running
            items × one item over.
          </p>
        </>
      )}
    </details>
  );
}
