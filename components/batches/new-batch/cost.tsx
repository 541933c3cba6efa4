"use client";

import { keepPreviousData, useQuery } from "@tanstack/react-query";
import { useEffect, useId, useState } from "react";
import { ApiError } from "@/lib/api/client";
import type { BatchEstimate } from "@/lib/api/batches";
import type { BatchSubmission } from "@/lib/api/files";
import { formatCount, formatUsd } from "@/lib/format";
import { outputAssumptionText } from "@/lib/output-assumption";
import { estimateBatch } from "../api";
import { errorMessage } from "../shared";
import { ErrorText } from "../ui";
import { relabelServerMessage } from "./typed-input";
import { labelClass, NumberInput } from "@/components/ui/field";

/** Where a batch's items run: live, or through the provider's batch API. */
export type BatchLane = "live" | "provider_batch";

/** What a submission carries for the run itself: a pilot's size and the lane. */
export interface RunExtras {
  pilot?: number;
  lane?: BatchLane;
}

/** What the dialog sends besides the draft: a pilot's size (when asked for) and the lane. */
export interface CostDraft {
  pilotOn: boolean;
  pilot: string;
  lane: BatchLane;
}

export const DEFAULT_PILOT = 10;
export const initialCostDraft = (): CostDraft => ({ pilotOn: false, pilot: String(DEFAULT_PILOT), lane: "live" });

/** The pilot's size when asked for (undefined: none), or why it is not a size the server takes. */
export function pilotValue(draft: CostDraft, maxPilot: number): { value: number | undefined; error: string | null } {
  if (!draft.pilotOn) return { value: undefined, error: null };
  const n = Number(draft.pilot);
  if (draft.pilot.trim() === "" || !Number.isInteger(n) || n < 1 || n > maxPilot)
    return { value: undefined, error: `Pilot items must be a whole number from 1 to ${maxPilot}.` };
  return { value: n, error: null };
}

/** How long the dialog waits after the last edit before it asks for an estimate. */
const ESTIMATE_DEBOUNCE_MS = 400;

function useDebounced<T>(value: T, ms: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    const t = setTimeout(() => setSettled(value), ms);
    return () => clearTimeout(t);
  }, [value, ms]);
  return settled;
}

/**
 * The server's estimate of the draft (`null` body: the draft has a problem of its own, so
 * nothing is asked), refreshed a moment after the last edit; the previous one stays shown
 * while the next is on its way.
 */
export function useBatchEstimate(threadId: string, body: BatchSubmission | null) {
  const text = useDebounced(body ? JSON.stringify(body) : null, ESTIMATE_DEBOUNCE_MS);
  const stale = (body ? JSON.stringify(body) : null) !== text;
  const query = useQuery({
    queryKey: ["batch-estimate", threadId, text],
    queryFn: ({ signal }) => estimateBatch(threadId, JSON.parse(text as string) as BatchSubmission, signal),
    enabled: text !== null,
    placeholderData: keepPreviousData,
    retry: false,
    staleTime: 60_000,
  });
  return { ...query, waiting: body !== null && (stale || query.isFetching) };
}

/** The estimate refused the draft as a submission would be (a 400): the draft cannot start either. */
export const refusedByEstimate = (error: unknown) => error instanceof ApiError && error.status === 400;

/** "≈1,234": counted with the model's tokenizer, or approximated at ~4 characters a token. */
const tokens = (n: number, e: BatchEstimate) => `${e.tokens_method === "approx" ? "≈" : ""}${formatCount(n)}`;

/** The estimate as a short line: items, tokens, the live cost and the batch lane's when it has one. */
export function EstimateView({
  estimate,
  error,
  waiting,
  blocked,
}: {
  estimate: BatchEstimate | undefined;
  error: unknown;
  waiting: boolean;
  /** The draft has a problem of its own: no estimate is asked for. */
  blocked: boolean;
}) {
  return (
    <section aria-label="Estimate" data-testid="new-batch-estimate" aria-busy={waiting || undefined} className="rounded-md bg-zinc-50 px-2 py-1.5 text-xs text-zinc-700 ring-1 ring-zinc-200 ring-inset">
      <p className="font-medium text-zinc-800">Estimate{waiting ? <span className="font-normal text-zinc-500"> · updating…</span> : null}</p>
      {blocked ? (
        <p className="text-zinc-500">Shown once the draft is complete.</p>
      ) : error ? (
        <ErrorText error={relabelServerMessage(errorMessage(error))} />
      ) : estimate ? (
        <dl className="mt-0.5 grid grid-cols-[auto_1fr] gap-x-3 gap-y-0.5" data-testid="new-batch-estimate-values">
          <dt>Items</dt>
          <dd data-testid="estimate-items">{formatCount(estimate.items)}</dd>
          <dt>Input tokens</dt>
          <dd data-testid="estimate-input">
            {tokens(estimate.input_tokens, estimate)}
            {estimate.cached_input_tokens > 0 ? ` (${tokens(estimate.cached_input_tokens, estimate)} cached)` : ""}
          </dd>
          <dt>Output tokens</dt>
          <dd data-testid="estimate-output">
            {tokens(estimate.output_tokens, estimate)}
            {estimate.output_per_item ? ` (${outputAssumptionText(estimate.output_per_item)})` : ""}
          </dd>
          <dt>Cost, live</dt>
          <dd data-testid="estimate-live">{formatUsd(estimate.cost_usd.live)}</dd>
          {estimate.cost_usd.provider_batch !== undefined ? (
            <>
              <dt>Cost, provider batch</dt>
              <dd data-testid="estimate-provider-batch">{formatUsd(estimate.cost_usd.provider_batch)}</dd>
            </>
          ) : null}
        </dl>
      ) : (
        <p className="text-zinc-500">Estimating…</p>
      )}
    </section>
  );
}

/** "Run a pilot first: N items", and the lane when the sub-agent's model has a batch lane. */
export function RunOptions({
  draft,
  onChange,
  laneAllowed,
  laneHint,
  pilotError,
  maxPilot,
}: {
  draft: CostDraft;
  onChange: (next: Partial<CostDraft>) => void;
  laneAllowed: boolean;
  /** Why the lane is not offered, when another choice would offer it. */
  laneHint?: string | null;
  pilotError: string | null;
  maxPilot: number;
}) {
  const ids = { pilot: useId(), lane: useId() };
  return (
    <div className="flex flex-col gap-2">
      <div className="flex flex-wrap items-center gap-x-2 gap-y-1">
        <input
          id={ids.pilot}
          type="checkbox"
          checked={draft.pilotOn}
          onChange={(e) => onChange({ pilotOn: e.target.checked })}
          className="size-4"
        />
        <label htmlFor={ids.pilot} className={labelClass}>
          Run a pilot first:
        </label>
        <NumberInput
          aria-label="Pilot items"
          min={1}
          max={maxPilot}
          disabled={!draft.pilotOn}
          value={draft.pilot}
          onChange={(pilot) => onChange({ pilot })}
          invalid={!!pilotError}
        />
        <span className="text-xs text-zinc-700">items</span>
        <p className="basis-full text-xs text-zinc-600">
          The batch pauses after them, so you can look at their results before resuming (or change the template and start again).
        </p>
        {pilotError ? <ErrorText error={pilotError} className="basis-full" /> : null}
      </div>
      {laneAllowed ? (
        <fieldset className="flex flex-col gap-1">
          <legend className={labelClass}>Lane</legend>
          <div className="flex flex-wrap gap-x-4 gap-y-1">
            {(
              [
                ["live", "Live"],
                ["provider_batch", "Provider batch (50% off, results within 24 h)"],
              ] as const
            ).map(([lane, label]) => (
              <label key={lane} className="flex items-center gap-1.5 text-xs text-zinc-800">
                <input
                  type="radio"
                  name={ids.lane}
                  value={lane}
                  checked={draft.lane === lane}
                  onChange={() => onChange({ lane })}
                  className="size-4"
                />
                {label}
              </label>
            ))}
          </div>
        </fieldset>
      ) : laneHint ? (
        <p data-testid="lane-hint" className="text-xs text-zinc-600">
          {laneHint}
        </p>
      ) : null}
    </div>
  );
}
