import type { ToolCallRecord } from "@/lib/api/runs";
import type { RunErrorClass } from "@/server/runtime/model-errors";
import type { RunOutcome } from "./settlement";
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

/**
 * What the executor answers for one item: the outcome the settlement policy reads (settlement.ts
 * `RunOutcome`: status, text, usage, the run row, typed output and checks, calls that wait for a
 * person, a hand-back), with its error class and the calls its run made.
 */
export interface ItemRunResult extends RunOutcome {
  errorClass?: RunErrorClass;
  toolCalls?: ToolCallRecord[];
}

export type ItemExecutor = (ctx: ItemRunContext) => Promise<ItemRunResult>;
