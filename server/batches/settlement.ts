import type { CheckResult, Verdict } from "@/lib/api/batch-data";
import type { LeaseRef } from "./types";

/**
 * How a held attempt ends (settle.sql), and the one policy that turns an executor's outcome
 * into a settlement: result truncation to max_result_chars, the preview cap, the rate-limit
 * deferral, the default error texts, and which failures are final whatever attempts remain.
 */

export interface Usage {
  /** All input tokens, cache reads and writes included. */
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens?: number;
  cacheWriteTokens?: number;
  /**
   * US dollars, when the executor priced the attempt itself (each model's tokens at that model's
   * price snapshot); absent, settle.sql prices the tokens at the batch's snapshot.
   */
  costUsd?: number;
}

/** An unwritten run row of the attempt, as run-rows.sql takes it (built by the executor). */
export type RunRowRecord = Record<string, unknown>;

/**
 * Typed results and checks of a finished attempt: stored when the item ends with this attempt
 * (succeeded, or failed with no attempt left); a re-queued item keeps none.
 */
export interface ItemData {
  output?: unknown;
  checks?: CheckResult[] | null;
  verdict?: Verdict | null;
}

/**
 * How a held attempt ends. `startedAtMs`: the item started (epoch ms) and ends in the same round
 * trip that would have marked it running; the settle writes the start time itself instead of a
 * running row no other transaction could ever see. `runRow`: the attempt's run row, written by
 * the settle in the same transaction (before the item's lease is checked, like the executor's own
 * insert would have been).
 */
export type Settlement = LeaseRef & { startedAtMs?: number; runRow?: RunRowRecord; steps?: boolean } & (
    | ({
        kind: "succeeded";
        result: string;
        preview: string;
        model?: string | null;
        stopReason?: string | null;
        usage?: Usage;
        runId?: string | null;
      } & ItemData)
    | ({
        kind: "failed";
        error: string;
        /** false: fail now whatever attempts remain. Default true. */
        retryable?: boolean;
        model?: string | null;
        stopReason?: string | null;
        usage?: Usage;
        runId?: string | null;
        /** Earliest next attempt (ms from now), e.g. after a rate limit past max_deferrals. */
        delayMs?: number;
      } & ItemData)
    /**
     * Handed back (shutdown, capacity refusal, local queue given up): back to queued, attempt
     * refunded; `usage`: what the attempt spent before a judge's admission was refused.
     */
    | { kind: "released"; runId?: string | null; usage?: Usage }
    /** Rate limited: back to queued after delayMs, attempt refunded (up to rate_limits.max_deferrals). */
    | { kind: "deferred"; delayMs: number; error: string; usage?: Usage; model?: string | null; runId?: string | null }
    /**
     * A tool call waits for a person: parked in awaiting_approval (no slot, no lease), attempt
     * refunded, one tool_approvals row per call; a decision re-queues it (approvals.sql).
     */
    | {
        kind: "awaiting_approval";
        approvals: PendingApproval[];
        error: string;
        usage?: Usage;
        model?: string | null;
        stopReason?: string | null;
        runId: string;
      }
  );

/** One call the model asked for that waits for a person (the AI SDK's tool-approval-request). */
export interface PendingApproval {
  approvalId: string;
  toolCallId: string;
  toolName: string;
  input: unknown;
}

/** What an executor reports for one item (the fields the policy reads). */
export interface RunOutcome extends ItemData {
  status: "completed" | "failed" | "cancelled" | "timed_out";
  text: string;
  usage: Usage;
  model: string | null;
  stopReason: string | null;
  error?: string;
  errorClass?: string;
  runId?: string;
  /** Provider advice for rate limits, when the executor knows it. */
  retryAfterMs?: number;
  runRow?: RunRowRecord;
  /** The attempt stored or resumed durable steps (steps.ts): the settle drops them when the item ends or starts over. */
  steps?: boolean;
  /** Calls that wait for a person: the attempt parks the item instead of ending it. */
  awaitingApproval?: PendingApproval[];
  /** Refused at the capacity boundary after spending tokens: handed back with its usage. */
  handBack?: boolean;
}

export interface ResultLimits {
  /** subagent_batches.max_result_chars: the stored result is cut to this. */
  maxResultChars: number;
  /** subagent_batches.result_preview_max_chars: the one preview cap. */
  previewMaxChars: number;
}

/** A rate limit without provider advice waits this long (±20 % jitter) before the item is claimable again. */
export const DEFAULT_RATE_LIMIT_DELAY_MS = 5_000;

/**
 * Failures another attempt would only repeat: an answer still invalid against the output schema
 * after its repair turn (the executor's `invalid_output`), an answer refused for the token
 * counts its provider reported (`invalid_usage`: another call would be paid for and refused again).
 */
const FINAL_ERROR_CLASSES: ReadonlySet<string> = new Set(["invalid_output", "invalid_usage"]);

/** Only the fields set, so batches without typed results or checks send nothing more per item. */
function itemData(r: ItemData): ItemData {
  const d: ItemData = {};
  if (r.output !== undefined) d.output = r.output;
  if (r.checks) d.checks = r.checks;
  if (r.verdict) d.verdict = r.verdict;
  return d;
}

export function settlementOf(ref: LeaseRef, r: RunOutcome, limits: ResultLimits): Settlement {
  const common = {
    model: r.model,
    stopReason: r.stopReason,
    usage: r.usage,
    runId: r.runId ?? null,
    runRow: r.runRow,
    ...(r.steps ? { steps: true } : {}),
  };
  if (r.handBack) return { ...ref, kind: "released", usage: r.usage, runId: r.runId ?? null, runRow: r.runRow };
  if (r.status === "completed") {
    const result = r.text.length > limits.maxResultChars ? r.text.slice(0, limits.maxResultChars) : r.text;
    return { ...ref, ...common, ...itemData(r), kind: "succeeded", result, preview: result.slice(0, limits.previewMaxChars) };
  }
  if (r.awaitingApproval?.length && r.runId) {
    const tools = [...new Set(r.awaitingApproval.map((a) => a.toolName))].join(", ");
    return {
      ...ref,
      kind: "awaiting_approval",
      approvals: r.awaitingApproval,
      error: `awaiting_approval: ${tools} waits for a person`,
      usage: r.usage,
      model: r.model,
      stopReason: "awaiting_approval",
      runId: r.runId,
      runRow: r.runRow,
    };
  }
  if (r.status === "failed" && r.errorClass === "rate_limit") {
    const base = r.retryAfterMs ?? DEFAULT_RATE_LIMIT_DELAY_MS;
    return {
      ...ref,
      kind: "deferred",
      delayMs: Math.round(base * (1 + Math.random() * 0.2)),
      error: r.error ?? "rate limited by the model provider",
      usage: r.usage,
      model: r.model,
      runId: r.runId ?? null,
      runRow: r.runRow,
      ...(r.steps ? { steps: true } : {}),
    };
  }
  const error =
    r.status === "timed_out"
      ? (r.error ?? "the sub-agent timed out")
      : r.status === "cancelled"
        ? (r.error ?? "the sub-agent run was stopped")
        : (r.error ?? "the sub-agent failed");
  const retryable = !(r.status === "failed" && r.errorClass !== undefined && FINAL_ERROR_CLASSES.has(r.errorClass));
  return { ...ref, ...common, ...itemData(r), kind: "failed", error, ...(retryable ? {} : { retryable }) };
}
