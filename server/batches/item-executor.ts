import type { CheckResult, Verdict } from "@/lib/api/batch-data";
import type { ToolCallRecord } from "@/lib/api/runs";
import type { RunErrorClass } from "@/server/runtime/model-errors";
import type { PendingApproval, RunRowRecord, Usage } from "./settlement";
import type { ExecutionSpec } from "./spec";
import type { ClaimedItem } from "./types";

/**
 * How the worker runs one claimed item. The default runs the shared sub-agent executor;
 * tests and benchmarks inject their own (same contract: acquire capacity, call onStarted
 * right before real work, honour the signal; throw CapacityRejectedError /
 * CapacityTimeoutError when refused by capacity).
 */

export interface ItemRunContext {
  item: ClaimedItem;
  /** The lease owner (the worker's id): step writes are fenced by it and the item's token. */
  workerId: string;
  spec: ExecutionSpec;
  signal: AbortSignal;
  /** Marks the item running (fenced). Throws when the lease is gone: the item must not run. */
  onStarted: () => Promise<void>;
}

export interface ItemRunResult {
  status: "completed" | "failed" | "cancelled" | "timed_out";
  text: string;
  usage: Usage;
  model: string | null;
  stopReason: string | null;
  error?: string;
  errorClass?: RunErrorClass;
  runId?: string;
  toolCalls?: ToolCallRecord[];
  /** Provider advice for rate limits, when the executor knows it. */
  retryAfterMs?: number;
  /** The item's run row, not yet written: the settle writes it (settlement.ts `runRow`). */
  runRow?: RunRowRecord;
  /** Typed results: the parsed answer (valid against the spec's output_schema). */
  output?: unknown;
  /** The spec's checks on the final answer, and the verdict they give (null without checks). */
  checks?: CheckResult[] | null;
  verdict?: Verdict | null;
  /** The attempt resumed or stored durable steps (server/batches/steps.ts). */
  steps?: boolean;
  /** Calls that wait for a person: the item parks in awaiting_approval (settlement.ts). */
  awaitingApproval?: PendingApproval[];
  /** Refused at the capacity boundary after spending tokens (a judge's admission): handed back, usage kept. */
  handBack?: boolean;
}

export type ItemExecutor = (ctx: ItemRunContext) => Promise<ItemRunResult>;
