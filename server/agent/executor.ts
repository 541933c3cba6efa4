import { randomUUID } from "node:crypto";
import {
  generateText,
  type LanguageModelMiddleware,
  type ModelMessage,
  NoObjectGeneratedError,
  stepCountIs,
  type ToolSet,
  wrapLanguageModel,
} from "ai";
import type { Db } from "@/server/db/client";
import { AbortReason, AppError, abortKind, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { traceAgentRun } from "@/server/telemetry";
import { classifyModelError, type RunErrorClass } from "@/server/runtime/model-errors";
import type { ResolvedModel } from "@/server/models/types";
import { admit, getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import { type CapacityController, CapacityTimeoutError, isCapacityError } from "@/server/runtime/capacity";
import { registerLiveRun } from "@/server/runtime/run-registry";
import type { ToolCallRecord } from "@/lib/api/runs";
import type { SubagentRunStatus, SubagentStatusUpdate, SubagentUsage } from "@/lib/api/subagents";
import type { StepJournal, StoredStep } from "@/server/batches/steps";
import { type ApprovalHandling, buildGroupTools, recordTools, ToolCallRecorder } from "@/server/tools";
import { approvalMatcherFor } from "@/server/tools/approval";
import {
  type ApprovalRequest,
  approvalRequestsOf,
  assertSameArguments,
  createChildApproval,
  deniedError,
  waitForDecision,
} from "./chat-approvals";
import type { SubagentDefinition } from "./registry";
import {
  createRun,
  type FinishedRunRow,
  finishedRunRow,
  finishRun,
  insertFinishedRun,
  markRunning,
  type TerminalStatus,
} from "./runs";
import "./prompt-schema";
import { readTypedAnswer, repairRequest, typedOutput } from "./structured-output";

/**
 * Runs one sub-agent to completion: row (pending) → capacity → running → model → final row.
 * Used by `task`, the swarm and the batch worker (whose items write their row once, at the end).
 */

export type { ApprovalRequest, RunErrorClass, SubagentRunStatus, SubagentStatusUpdate, SubagentUsage };

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

/** Abort reason when the definition's time limit passes. */
const timedOut = (timeoutMs: number) =>
  new AbortReason("timeout", `the sub-agent did not finish within its time limit of ${Math.round(timeoutMs / 1000)}s`);

/** Tools that first make sure the run row exists (a deferred batch-item row), then run. */
function withRunRow(tools: ToolSet, ensureRow: () => Promise<void>): ToolSet {
  return Object.fromEntries(
    Object.entries(tools).map(([name, t]) => {
      const execute = t.execute;
      if (!execute) return [name, t];
      const wrapped = async (...a: Parameters<typeof execute>) => {
        await ensureRow();
        return execute(...a);
      };
      return [name, { ...t, execute: wrapped }];
    }),
  ) as ToolSet;
}

/** Tool groups and models this process lacks fail the run with that class, naming what is missing. */
function unavailableClass(err: unknown): "tool_unavailable" | "model_unavailable" | undefined {
  if (err instanceof AppError && (err.code === "tool_unavailable" || err.code === "model_unavailable")) return err.code;
  return undefined;
}

/** The fields of a sub-agent's run row, as runSubagent writes them (createRun takes them). */
export function childRunFields(opts: Omit<RunSubagentOptions, "signal">) {
  return {
    userId: opts.userId,
    threadId: opts.threadId,
    parentRunId: opts.parentRunId,
    rootRunId: opts.rootRunId ?? opts.parentRunId,
    retryOfRunId: opts.retryOfRunId,
    resumedFromRunId: opts.resumedFromRunId,
    kind: opts.kind,
    definition: opts.definition.name,
    model: opts.model.catalogName,
    prompt: opts.prompt,
    toolCallId: opts.toolCallId,
    depth: opts.depth ?? 1,
  };
}

export function runSubagent(db: Db, opts: RunSubagentOptions): Promise<SubagentRunResult> {
  const traced = { agent: opts.definition.name, model: opts.model.name, threadId: opts.threadId, runId: opts.runId };
  return traceAgentRun(traced, () => runSubagentInSpan(db, opts));
}

async function runSubagentInSpan(db: Db, opts: RunSubagentOptions): Promise<SubagentRunResult> {
  const runtime = opts.runtime ?? getSubagentRuntime();
  const def = opts.definition;
  const model = opts.model;
  const depth = opts.depth ?? 1;
  const runFields = childRunFields(opts);
  // A batch item's durable record is its item row (claimed, fenced, settled): its run row is
  // written once at the end instead of pending → running → final, or as soon as a tool is
  // about to run (tools record their run on what they write). Nobody reads a batch item's run
  // before the settle links it to the item, and Stop never reaches batch items.
  const deferRow = opts.kind === "batch_item";
  const createdAt = new Date();
  const runId = deferRow ? randomUUID() : (opts.runId ?? (await createRun(db, runFields)).id);
  let rowWritten = !deferRow;
  let startedWall: Date | null = null;
  let rowInsert: Promise<void> | undefined;
  const ensureRow = () => {
    rowInsert ??= createRun(db, { ...runFields, id: runId, createdAt, status: "running" }).then(() => {
      rowWritten = true;
    });
    return rowInsert;
  };
  const rootRunId = opts.rootRunId ?? opts.parentRunId ?? runId;
  // Built only when something is logged: a child logger per run was ~1 % of a batch item's CPU.
  const runLog = () => log.child({ run_id: runId, kind: opts.kind, definition: def.name });

  // Our own controller: aborted by the caller's signal, by Stop (registry) or by the time limit.
  const controller = new AbortController();
  const onParentAbort = () => controller.abort(opts.signal.reason ?? new AbortReason("stopped", "cancelled by the caller"));
  if (opts.signal.aborted) onParentAbort();
  else opts.signal.addEventListener("abort", onParentAbort, { once: true });
  const unregister = registerLiveRun(runId, controller);

  let usage: SubagentUsage = { inputTokens: 0, outputTokens: 0 };
  const recorder = new ToolCallRecorder();
  let startedAt = 0;
  const duration = () => (startedAt ? Math.round(performance.now() - startedAt) : 0);
  const emit = (status: SubagentStatusUpdate["status"], extra: Partial<SubagentStatusUpdate> = {}) => {
    try {
      opts.onStatus?.({ runId, definition: def.name, model: model.catalogName, status, usage, durationMs: duration(), ...extra });
    } catch (err) {
      runLog().warn({ err }, "status listener failed");
    }
  };

  const finish = async (
    status: TerminalStatus & SubagentRunStatus,
    fields: {
      text?: string;
      output?: unknown;
      stopReason: string | null;
      error?: string;
      errorClass?: RunErrorClass;
      transcript?: unknown[];
      awaitingApproval?: ApprovalRequest[];
    },
  ): Promise<SubagentRunResult> => {
    const final = {
      status,
      stopReason: fields.stopReason,
      result: fields.text ?? null,
      error: fields.error ?? null,
      usage,
      transcript: fields.transcript,
      toolCalls: recorder.calls,
    };
    await rowInsert?.catch(() => {});
    let runRow: FinishedRunRow | undefined;
    if (!rowWritten && opts.returnRunRow)
      runRow = finishedRunRow({ ...runFields, id: runId, createdAt, startedAt: startedWall, ...final });
    else if (!rowWritten)
      await insertFinishedRun(db, { ...runFields, id: runId, createdAt, startedAt: startedWall, ...final });
    else if (!(await finishRun(db, { runId, ...final })))
      runLog().warn({ status }, "run row was already final; kept the earlier outcome");
    const result: SubagentRunResult = {
      runId,
      status,
      text: fields.text ?? "",
      usage,
      model: model.catalogName,
      stopReason: fields.stopReason,
      definition: def.name,
      durationMs: duration(),
      toolCalls: [...recorder.calls],
      ...(runRow ? { runRow } : {}),
      ...("output" in fields ? { output: fields.output } : {}),
      ...(fields.error !== undefined ? { error: fields.error } : {}),
      ...(fields.errorClass !== undefined ? { errorClass: fields.errorClass } : {}),
      ...(fields.awaitingApproval?.length ? { awaitingApproval: fields.awaitingApproval } : {}),
    };
    emit(status, { stopReason: fields.stopReason, error: fields.error });
    return result;
  };

  const cancelledFields = () => {
    const reason = controller.signal.reason;
    return {
      stopReason: abortKind(reason) === "stopped" ? "stopped" : "cancelled",
      error: errorText(reason ?? "cancelled"),
    };
  };

  let release: (() => void) | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // The definition's time limit counts the run's own work, not a person's decision.
  let timeLeft = def.timeoutMs;
  let timerStarted = 0;
  const startTimer = () => {
    timerStarted = performance.now();
    timer = setTimeout(() => controller.abort(timedOut(def.timeoutMs)), Math.max(0, timeLeft));
  };
  const pauseTimer = () => {
    clearTimeout(timer);
    timeLeft -= performance.now() - timerStarted;
  };
  const admission = () =>
    admit(runtime, {
      kind: opts.kind,
      threadId: opts.threadId,
      parentRunId: opts.parentRunId,
      rootRunId,
      depth,
      signal: controller.signal,
      capacity: opts.capacity,
    });
  /**
   * A chat child's call that needs a person: its row, then the wait, without the run's slot
   * (and its lanes) and with its clock stopped while every call of it waits; the slot is taken
   * again (queueing like any run) before an approved call runs. Nested runs (depth > 1) keep
   * theirs: they may not queue for one again (their ancestors hold slots).
   */
  let waiting = 0;
  let readmitting: Promise<void> | undefined;
  const approvalGate: ApprovalHandling = {
    mode: "wait",
    gate: async (call) => {
      if (!opts.threadId) throw new AppError("forbidden", `${call.toolName} needs a person's approval, and this run has no thread to ask in`);
      const timeoutSeconds = runtime.config.tools.approval_timeout_seconds;
      const approval = await createChildApproval(db, {
        userId: opts.userId,
        threadId: opts.threadId,
        runId,
        toolCallId: call.toolCallId,
        toolName: call.toolName,
        input: call.input,
        timeoutSeconds,
      });
      if (waiting++ === 0) {
        pauseTimer();
        if (depth === 1) {
          release?.();
          release = undefined;
        }
      }
      let decision: Awaited<ReturnType<typeof waitForDecision>>;
      try {
        decision = await waitForDecision(db, { approval, timeoutSeconds, signal: controller.signal });
      } finally {
        if (--waiting === 0 && !controller.signal.aborted) startTimer();
      }
      if (decision.status !== "approved") throw deniedError(decision.reason);
      if (!release) {
        readmitting ??= admission().then(
          (r) => {
            release = r;
            readmitting = undefined;
          },
          (err) => {
            readmitting = undefined;
            throw err;
          },
        );
        await readmitting;
      }
      assertSameArguments(decision, call.input);
    },
  };
  try {
    opts.onCreated?.(runId);
    emit("pending");
    try {
      release = await admission();
    } catch (err) {
      if (isCapacityError(err)) {
        await finish("failed", {
          stopReason: err instanceof CapacityTimeoutError ? "capacity_timeout" : "capacity_rejected",
          error: err.message,
        });
        throw err;
      }
      if (controller.signal.aborted) return await finish("cancelled", cancelledFields());
      throw err;
    }
    // Granted, but stopped in the same tick, or cancelled in the database while we waited.
    if (controller.signal.aborted) return await finish("cancelled", cancelledFields());
    if (!deferRow && !(await markRunning(db, { runId })))
      return await finish("cancelled", { stopReason: "stopped", error: "stopped before it started" });
    startedAt = performance.now();
    startedWall = new Date();
    emit("running");
    await opts.onStarted?.();
    if (controller.signal.aborted) return await finish("cancelled", cancelledFields());

    startTimer();
    const journal = opts.steps ? durableSteps(opts.steps, recorder, () => controller.abort(stepLeaseLost())) : undefined;
    const input: ModelMessage[] = journal
      ? [...journal.input(opts.prompt), ...(opts.approvalDecisions ? [opts.approvalDecisions] : [])]
      : (opts.replay ?? [...(opts.history ?? []), { role: "user", content: opts.prompt }]);
    let partial: unknown[] = input;
    try {
      const groupCtx = {
        db,
        config: runtime.config,
        userId: opts.userId,
        threadId: opts.threadId ?? null,
        runId,
        signal: controller.signal,
        idempotencyKey: journal?.key,
      };
      const built = {
        // A call that needs a person parks a batch item; a chat child's waits for the decision.
        ...(await buildGroupTools(
          def.toolGroups,
          groupCtx,
          recorder,
          approvalMatcherFor(runtime.config, def.name),
          opts.kind === "batch_item" ? { mode: "ask" } : approvalGate,
        )),
        ...(opts.delegate && opts.kind !== "batch_item"
          ? recordTools(opts.delegate({ runId, rootRunId, depth, model, signal: controller.signal, runtime }), recorder)
          : {}),
      };
      const tools = deferRow ? withRunRow(built, ensureRow) : built;
      const typed = def.outputSchema ? typedOutput(def.outputSchema) : undefined;
      // Model steps this attempt may still take (resumed steps count against the definition's turns).
      const turnsLeft = Math.max(1, def.maxTurns - (journal?.resumedSteps ?? 0));
      // One model call with its tool steps (the repair turn: one step, no tools). A typed answer
      // that is not JSON makes the AI SDK throw; it is read like any other answer below.
      const ask = async (messages: ModelMessage[], repair: boolean) => {
        try {
          const result = await generateText({
            model: journal ? wrapLanguageModel({ model: model.model, middleware: journal.middleware }) : model.model,
            system: typed ? `${def.systemPrompt}\n\n${typed.instructions}` : def.systemPrompt,
            messages,
            tools,
            ...(repair
              ? { toolChoice: "none" as const, stopWhen: stepCountIs(1) }
              : { stopWhen: stepCountIs(turnsLeft) }),
            ...(typed ? { output: typed.output } : {}),
            abortSignal: controller.signal,
            onStepFinish: (step) => {
              usage = {
                inputTokens: usage.inputTokens + (step.usage.inputTokens ?? 0),
                outputTokens: usage.outputTokens + (step.usage.outputTokens ?? 0),
              };
              partial = [...messages, ...step.response.messages];
              emit("running");
              return journal?.stepFinished(step, def.maxTurns);
            },
          });
          // Out of turns while still calling tools: the text so far is what we have.
          const stopReason =
            result.finishReason === "tool-calls" && result.steps.length >= turnsLeft ? "max_turns" : result.finishReason;
          return {
            text: result.text,
            stopReason,
            transcript: [...messages, ...result.response.messages],
            approvals: approvalRequestsOf(result.content),
          };
        } catch (err) {
          if (!typed || !NoObjectGeneratedError.isInstance(err) || controller.signal.aborted) throw err;
          return {
            text: err.text ?? "",
            stopReason: err.finishReason ?? "stop",
            transcript: partial as ModelMessage[],
            approvals: [] as ApprovalRequest[],
          };
        }
      };
      let answer = await ask(input, false);
      if (controller.signal.aborted)
        return await finish(abortStatus(controller.signal), { ...abortFields(), transcript: answer.transcript });
      if (answer.approvals.length > 0)
        return await finish("cancelled", {
          stopReason: "awaiting_approval",
          error: `awaiting_approval: ${[...new Set(answer.approvals.map((a) => a.toolName))].join(", ")} waits for a person`,
          transcript: answer.transcript,
          awaitingApproval: answer.approvals,
        });
      if (!typed) return await finish("completed", answer);
      let read = readTypedAnswer(answer.text, typed.validate);
      if (!read.ok) {
        // Exactly one repair turn, quoting the validator's errors.
        answer = await ask([...answer.transcript, repairRequest(read.errors)], true);
        if (controller.signal.aborted)
          return await finish(abortStatus(controller.signal), { ...abortFields(), transcript: answer.transcript });
        read = readTypedAnswer(answer.text, typed.validate);
      }
      if (!read.ok)
        return await finish("failed", {
          text: answer.text,
          stopReason: "invalid_output",
          error: `invalid_output: ${read.errors}`,
          errorClass: "invalid_output",
          transcript: answer.transcript,
        });
      return await finish("completed", { ...answer, text: JSON.stringify(read.value), output: read.value });
    } catch (err) {
      if (controller.signal.aborted)
        return await finish(abortStatus(controller.signal), { ...abortFields(), transcript: partial });
      const unavailable = unavailableClass(err);
      if (unavailable)
        return await finish("failed", {
          stopReason: unavailable,
          error: `${unavailable}: ${errorText(err)}`,
          errorClass: unavailable,
          transcript: partial,
        });
      const errorClass = classifyModelError(err);
      runLog().warn({ err, errorClass }, "sub-agent failed");
      return await finish("failed", { stopReason: "error", error: errorText(err), errorClass, transcript: partial });
    }
  } catch (err) {
    if (isCapacityError(err)) throw err;
    // Anything unexpected (database, onStarted): never leave the row active.
    const failed = { status: "failed" as const, stopReason: "error", error: errorText(err), usage };
    await rowInsert?.catch(() => {});
    await (rowWritten
      ? finishRun(db, { runId, ...failed })
      : insertFinishedRun(db, { ...runFields, id: runId, createdAt, startedAt: startedWall, ...failed })
    ).catch(() => {});
    emit("failed", { error: errorText(err) });
    throw err;
  } finally {
    clearTimeout(timer);
    release?.();
    opts.signal.removeEventListener("abort", onParentAbort);
    unregister();
  }

  function abortStatus(signal: AbortSignal): "timed_out" | "cancelled" {
    return abortKind(signal.reason) === "timeout" ? "timed_out" : "cancelled";
  }
  function abortFields() {
    const reason = controller.signal.reason;
    if (abortKind(reason) === "timeout") return { stopReason: "timeout", error: errorText(reason) };
    return cancelledFields();
  }
}

/** Abort reason when a step write finds the item's lease gone: the worker settles nothing. */
const stepLeaseLost = () =>
  new AbortReason("lease_lost", "the lease on this item is no longer held (a step could not be stored)");

type FinishedStep = { toolCalls: readonly unknown[]; response: { messages: ModelMessage[] } };

/**
 * The executor's side of durable steps: where the run starts, where each tool call sits (its
 * model step and its 0-based position in that step: the idempotency key), and storing a completed
 * step that another follows. A step whose write is refused (lease gone) aborts the run; a write
 * that fails otherwise is logged and the run goes on (at worst a later attempt repeats the step
 * under the same keys).
 */
function durableSteps(journal: StepJournal, recorder: ToolCallRecorder, onLeaseLost: () => void) {
  let done = journal.resumed.length;
  // Within one generateText call: response messages so far, and calls recorded so far.
  let seenMessages = 0;
  const placed = new Map<string, { step: number; call: number }>();
  const place = (step: number, ids: readonly string[]) => {
    for (const [call, id] of ids.entries()) placed.set(id, { step, call });
  };
  for (const s of journal.resumed) {
    for (const c of s.toolCalls) recorder.add(c);
    // A resumed step's calls can still run here: the approved ones of the step that parked.
    place(s.step, s.messages.flatMap(toolCallIdsOf));
  }
  let seenCalls = recorder.calls.length;
  return {
    resumedSteps: journal.resumed.length,
    input(prompt: string): ModelMessage[] {
      return [{ role: "user", content: prompt }, ...journal.resumed.flatMap((s) => s.messages)];
    },
    /** Places the calls of each model answer (step done + 1), in order, before any of them runs. */
    middleware: {
      specificationVersion: "v3",
      wrapGenerate: async ({ doGenerate }) => {
        const result = await doGenerate();
        place(
          done + 1,
          result.content.flatMap((p) => (p.type === "tool-call" ? [p.toolCallId] : [])),
        );
        return result;
      },
    } satisfies LanguageModelMiddleware,
    key(toolCallId: string): string {
      const at = placed.get(toolCallId);
      // Every call the tools see came from a model answer or a stored step; never guess a key.
      if (!at) throw new Error(`tool call ${toolCallId} has no place in this item's steps`);
      return journal.key(at.step, at.call);
    },
    async stepFinished(step: FinishedStep, maxTurns: number): Promise<void> {
      done++;
      const all = step.response.messages;
      const messages = all.slice(seenMessages);
      seenMessages = all.length;
      const toolCalls = recorder.calls.slice(seenCalls);
      seenCalls = recorder.calls.length;
      // Only a step another follows: an answer (no tool calls) or the last allowed turn ends the run.
      if (step.toolCalls.length === 0 || done >= maxTurns) return;
      const stored: StoredStep = { step: done, messages, toolCalls };
      try {
        if (!(await journal.save(stored))) onLeaseLost();
      } catch (err) {
        log.warn({ err, step: done }, "could not store a batch item's step; a later attempt may repeat it");
      }
    },
  };
}

/** The ids of an assistant message's tool calls, in order. */
function toolCallIdsOf(message: ModelMessage): string[] {
  if (message.role !== "assistant" || typeof message.content === "string") return [];
  return message.content.flatMap((p) => (p.type === "tool-call" ? [p.toolCallId] : []));
}
