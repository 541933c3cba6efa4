import type { ModelMessage, ToolSet } from "ai";
import type { ToolCallRecord } from "@/lib/api/runs";
import type { SubagentRunStatus, SubagentStatusUpdate, SubagentUsage } from "@/lib/api/subagents";
import type { StepJournal } from "@/server/batches/steps";
import type { ResolvedModel } from "@/server/models/types";
import type { CapacityController } from "@/server/runtime/capacity";
import type { RunErrorClass } from "@/server/runtime/model-errors";
import type { SubagentRuntime } from "@/server/runtime/admission";
import type { ApprovalRequest } from "../chat-approvals";
import type { SubagentDefinition } from "../registry";
import type { FinishedRunRow } from "../runs";

/** What runSubagent takes and gives back (../executor.ts composes the stages of this folder). */

export interface RunSubagentOptions {
  userId: string;
  threadId?: string;
  parentRunId?: string;
  rootRunId?: string;
  kind: "task" | "swarm_child" | "batch_item";
  /** What runs, resolved by the caller (registry.resolveSubagent, or a batch's snapshot). */
  definition: SubagentDefinition;
  prompt: string;
  /** The model it runs on, resolved by the caller (the definition's own model, else the caller's). */
  model: ResolvedModel;
  signal: AbortSignal;
  /** 1 for direct children of a lead run (default), 2+ for nested delegation. */
  depth?: number;
  toolCallId?: string;
  /** Earlier model messages to continue from (resume); the prompt is appended as a user message. */
  history?: ModelMessage[];
  /**
   * A retry's materialized history (its prompt, tool calls and results): the run continues from
   * it and sends no second prompt. `prompt` is then only recorded on the row.
   */
  replay?: ModelMessage[];
  retryOfRunId?: string;
  resumedFromRunId?: string;
  /**
   * The run's pending row, already created by the caller with childRunFields (a background
   * call answers with its children's ids before they start). Absent: the row is created here.
   */
  runId?: string;
  /** Process controller to acquire from; defaults to the runtime's (getProcessCapacity()). */
  capacity?: CapacityController;
  /** Called once the slot is held and right before the model runs. */
  onStarted?: () => Promise<void> | void;
  /** Called with the run id right after the row is created (pending). */
  onCreated?: (runId: string) => void;
  /** Called on every status change (pending, running, final). Must not throw. */
  onStatus?: (update: SubagentStatusUpdate) => void;
  /** Capacity boundary and configuration; defaults to the process runtime. Tests pass their own. */
  runtime?: SubagentRuntime;
  /**
   * Tools through which this sub-agent may delegate further (the task tool's nested `task`),
   * asked once the run exists. Absent: it cannot delegate (batch items never can).
   */
  delegate?: (run: DelegatingRun) => ToolSet;
  /**
   * Batch items of the worker: a run row still unwritten at the end (no tool ran) is returned as
   * `runRow` for the caller to write with the item's settlement, in the same round trip, instead
   * of its own insert (which also held the capacity slot for one more round trip).
   */
  returnRunRow?: boolean;
  /**
   * Batch items: durable steps (server/batches/steps.ts). The run continues after the steps
   * earlier attempts stored (its prompt, then their messages; their tool calls join this run's),
   * stores each completed step another step follows, and gives each tool call its idempotency key.
   */
  steps?: StepJournal;
  /**
   * Batch items whose last attempt parked on a call that needs a person: the tool message with
   * the decisions (server/batches/approvals.ts), sent after the stored steps.
   */
  approvalDecisions?: ModelMessage;
  /**
   * Batch items: the batch's prompt-cache key (`flotilla:<batch_id>`) and shared prefix (the
   * template's text before its first placeholder), for executor/prompt-cache.ts.
   */
  promptCache?: { key: string; sharedPrefix: string };
}

/** What a delegation tool needs to know about the run that delegates. */
export interface DelegatingRun {
  runId: string;
  rootRunId: string;
  depth: number;
  model: ResolvedModel;
  signal: AbortSignal;
  runtime: SubagentRuntime;
}

export interface SubagentRunResult {
  runId: string;
  status: SubagentRunStatus;
  text: string;
  usage: SubagentUsage;
  model: string;
  stopReason: string | null;
  error?: string;
  errorClass?: RunErrorClass;
  definition: string;
  /** Tool calls of this run, in the order they finished. */
  toolCalls: ToolCallRecord[];
  /** Execution time once the slot was held (0 when it never started). */
  durationMs: number;
  /** The run row, still to be written by the caller (only with `returnRunRow`). */
  runRow?: FinishedRunRow;
  /** With the definition's `outputSchema`: the final answer parsed and valid against it (`text` is its JSON). */
  output?: unknown;
  /**
   * Batch items: calls that wait for a person (tools.require_approval). The run ends `cancelled`
   * with stop reason `awaiting_approval` and its transcript stored; the item parks (settlement.ts).
   */
  awaitingApproval?: ApprovalRequest[];
}

