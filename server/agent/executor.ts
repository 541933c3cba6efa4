import { generateText, type ModelMessage, stepCountIs, type ToolSet, tool } from "ai";
import { z } from "zod";
import type { Db } from "@/server/db/client";
import { log } from "@/server/log";
import { classifyModelError, type ModelErrorClass } from "@/server/models/errors";
import { resolveModel } from "@/server/models/index";
import type { ResolvedModel } from "@/server/models/types";
import { admit, getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import { workspaceTools } from "@/server/tools/workspace";
import { type CapacityController, CapacityTimeoutError, isCapacityError } from "@/server/runtime/capacity";
import { registerLiveRun, RunStoppedError } from "@/server/runtime/run-registry";
import { getSubagentDefinition, type SubagentDefinition, type ToolGroup } from "./registry";
import { createRun, finishRun, markRunning, type TerminalStatus } from "./runs";

/**
 * Runs one sub-agent to completion: row (pending) → capacity → running → model → final row.
 * Used unchanged by `task`, the swarm and the batch worker.
 */

export type SubagentRunStatus = "completed" | "failed" | "cancelled" | "timed_out";

export interface SubagentUsage {
  inputTokens: number;
  outputTokens: number;
}

/** A status change, for live UI (the task tool turns these into data parts). */
export interface SubagentStatusUpdate {
  runId: string;
  definition: string;
  model: string;
  status: "pending" | "running" | SubagentRunStatus;
  usage: SubagentUsage;
  /** Milliseconds since the slot was acquired (0 while pending). */
  durationMs: number;
  stopReason?: string | null;
  error?: string;
}

export interface RunSubagentOptions {
  userId: string;
  threadId?: string;
  parentRunId?: string;
  rootRunId?: string;
  kind: "task" | "swarm_child" | "batch_item";
  definition: string;
  prompt: string;
  model: ResolvedModel;
  signal: AbortSignal;
  /** 1 for direct children of a lead run (default), 2+ for nested delegation. */
  depth?: number;
  toolCallId?: string;
  /** Earlier model messages to continue from (resume); the prompt is appended as a user message. */
  history?: ModelMessage[];
  retryOfRunId?: string;
  resumedFromRunId?: string;
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
}

export interface SubagentRunResult {
  runId: string;
  status: SubagentRunStatus;
  text: string;
  usage: SubagentUsage;
  model: string;
  stopReason: string | null;
  error?: string;
  errorClass?: ModelErrorClass;
  definition: string;
  /** Execution time once the slot was held (0 when it never started). */
  durationMs: number;
}

/** Abort reason when the definition's time limit passes. */
export class SubagentTimeoutError extends Error {
  constructor(readonly timeoutMs: number) {
    super(`the sub-agent did not finish within its time limit of ${Math.round(timeoutMs / 1000)}s`);
    this.name = "TimeoutError";
  }
}

/** Tools a definition's groups grant. Delegation tools are never here: see delegationTools. */
function groupTools(groups: ToolGroup[]): ToolSet {
  const tools: ToolSet = {};
  if (groups.includes("clock"))
    tools.current_time = tool({
      description: "The current date and time (ISO 8601, UTC) and the server's time zone.",
      inputSchema: z.object({}),
      execute: async () => ({
        now: new Date().toISOString(),
        time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      }),
    });
  if (groups.includes("text"))
    tools.count_text = tool({
      description: "Exact character, word and line counts of a text (for length limits and summaries).",
      inputSchema: z.object({ text: z.string().max(1_000_000) }),
      execute: async ({ text }) => ({
        characters: text.length,
        words: text.trim() === "" ? 0 : text.trim().split(/\s+/).length,
        lines: text === "" ? 0 : text.split(/\r\n|\r|\n/).length,
      }),
    });
  return tools;
}

/**
 * Sub-agents get delegation only when nesting is configured and they are above the depth
 * limit; then only `task` (never agent_swarm or batch_task). Loaded lazily: task.ts itself
 * depends on this module.
 */
async function delegationTools(args: {
  db: Db;
  runtime: SubagentRuntime;
  opts: RunSubagentOptions;
  runId: string;
  rootRunId: string;
  depth: number;
  model: ResolvedModel;
  signal: AbortSignal;
}): Promise<ToolSet> {
  if (args.depth >= args.runtime.config.subagents.max_depth || args.opts.kind === "batch_item") return {};
  const { createTaskTool } = await import("./tools/task");
  return {
    task: createTaskTool({
      db: args.db,
      config: args.runtime.config,
      userId: args.opts.userId,
      threadId: args.opts.threadId ?? "",
      runId: args.runId,
      rootRunId: args.rootRunId,
      depth: args.depth,
      model: args.model,
      abortSignal: args.signal,
      runtime: args.runtime,
    }),
  };
}

function modelFor(def: SubagentDefinition, fallback: ResolvedModel, runtime: SubagentRuntime): ResolvedModel {
  // A definition may name another model served by the same endpoint; the simulator serves every name.
  if (!def.model || fallback.simulator || def.model === fallback.name) return fallback;
  return resolveModel(runtime.config, { ...process.env, MODEL_NAME: def.model });
}

function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

export async function runSubagent(db: Db, opts: RunSubagentOptions): Promise<SubagentRunResult> {
  const runtime = opts.runtime ?? getSubagentRuntime();
  const def = getSubagentDefinition(opts.definition, runtime.config);
  const model = modelFor(def, opts.model, runtime);
  const depth = opts.depth ?? 1;
  const row = await createRun(db, {
    userId: opts.userId,
    threadId: opts.threadId,
    parentRunId: opts.parentRunId,
    rootRunId: opts.rootRunId ?? opts.parentRunId,
    retryOfRunId: opts.retryOfRunId,
    resumedFromRunId: opts.resumedFromRunId,
    kind: opts.kind,
    definition: def.name,
    model: model.name,
    prompt: opts.prompt,
    toolCallId: opts.toolCallId,
    depth,
  });
  const runId = row.id;
  const rootRunId = opts.rootRunId ?? opts.parentRunId ?? runId;
  const logger = log.child({ run_id: runId, kind: opts.kind, definition: def.name });

  // Our own controller: aborted by the caller's signal, by Stop (registry) or by the time limit.
  const controller = new AbortController();
  const onParentAbort = () => controller.abort(opts.signal.reason ?? new RunStoppedError("cancelled by the caller"));
  if (opts.signal.aborted) onParentAbort();
  else opts.signal.addEventListener("abort", onParentAbort, { once: true });
  const unregister = registerLiveRun(runId, controller);

  let usage: SubagentUsage = { inputTokens: 0, outputTokens: 0 };
  let startedAt = 0;
  const duration = () => (startedAt ? Math.round(performance.now() - startedAt) : 0);
  const emit = (status: SubagentStatusUpdate["status"], extra: Partial<SubagentStatusUpdate> = {}) => {
    try {
      opts.onStatus?.({ runId, definition: def.name, model: model.name, status, usage, durationMs: duration(), ...extra });
    } catch (err) {
      logger.warn({ err }, "status listener failed");
    }
  };

  const finish = async (
    status: TerminalStatus & SubagentRunStatus,
    fields: { text?: string; stopReason: string | null; error?: string; errorClass?: ModelErrorClass; transcript?: unknown[] },
  ): Promise<SubagentRunResult> => {
    const wrote = await finishRun(db, {
      runId,
      status,
      stopReason: fields.stopReason,
      result: fields.text ?? null,
      error: fields.error ?? null,
      usage,
      transcript: fields.transcript,
    });
    if (!wrote) logger.warn({ status }, "run row was already final; kept the earlier outcome");
    const result: SubagentRunResult = {
      runId,
      status,
      text: fields.text ?? "",
      usage,
      model: model.name,
      stopReason: fields.stopReason,
      definition: def.name,
      durationMs: duration(),
      ...(fields.error !== undefined ? { error: fields.error } : {}),
      ...(fields.errorClass !== undefined ? { errorClass: fields.errorClass } : {}),
    };
    emit(status, { stopReason: fields.stopReason, error: fields.error });
    return result;
  };

  const cancelledFields = () => {
    const reason = controller.signal.reason;
    return {
      stopReason: reason instanceof RunStoppedError ? "stopped" : "cancelled",
      error: errorMessage(reason ?? "cancelled"),
    };
  };

  let release: (() => void) | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    opts.onCreated?.(runId);
    emit("pending");
    try {
      release = await admit(runtime, {
        kind: opts.kind,
        threadId: opts.threadId,
        parentRunId: opts.parentRunId,
        rootRunId,
        depth,
        signal: controller.signal,
        capacity: opts.capacity,
      });
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
    if (!(await markRunning(db, { runId })))
      return await finish("cancelled", { stopReason: "stopped", error: "stopped before it started" });
    startedAt = performance.now();
    emit("running");
    await opts.onStarted?.();
    if (controller.signal.aborted) return await finish("cancelled", cancelledFields());

    timer = setTimeout(() => controller.abort(new SubagentTimeoutError(def.timeoutMs)), def.timeoutMs);
    const input: ModelMessage[] = [...(opts.history ?? []), { role: "user", content: opts.prompt }];
    let partial: unknown[] = input;
    try {
      const tools = {
        ...groupTools(def.toolGroups),
        // Bridge until the tool-group registry (server/tools/index.ts) builds every group.
        ...(def.toolGroups.includes("workspace")
          ? workspaceTools({ db, config: runtime.config, userId: opts.userId, threadId: opts.threadId ?? null, runId, signal: controller.signal })
          : {}),
        ...(await delegationTools({ db, runtime, opts, runId, rootRunId, depth, model, signal: controller.signal })),
      };
      const result = await generateText({
        model: model.model,
        system: def.systemPrompt,
        messages: input,
        tools,
        stopWhen: stepCountIs(def.maxTurns),
        abortSignal: controller.signal,
        onStepFinish: (step) => {
          usage = {
            inputTokens: usage.inputTokens + (step.usage.inputTokens ?? 0),
            outputTokens: usage.outputTokens + (step.usage.outputTokens ?? 0),
          };
          partial = [...input, ...step.response.messages];
          emit("running");
        },
      });
      usage = { inputTokens: result.totalUsage.inputTokens ?? 0, outputTokens: result.totalUsage.outputTokens ?? 0 };
      const transcript = [...input, ...result.response.messages];
      // Out of turns while still calling tools: the text so far is what we have.
      const stopReason =
        result.finishReason === "tool-calls" && result.steps.length >= def.maxTurns ? "max_turns" : result.finishReason;
      if (controller.signal.aborted) return await finish(abortStatus(controller.signal), { ...abortFields(), transcript });
      return await finish("completed", { text: result.text, stopReason, transcript });
    } catch (err) {
      if (controller.signal.aborted)
        return await finish(abortStatus(controller.signal), { ...abortFields(), transcript: partial });
      const errorClass = classifyModelError(err);
      logger.warn({ err: errorMessage(err), errorClass }, "sub-agent failed");
      return await finish("failed", { stopReason: "error", error: errorMessage(err), errorClass, transcript: partial });
    }
  } catch (err) {
    if (isCapacityError(err)) throw err;
    // Anything unexpected (database, onStarted): never leave the row active.
    await finishRun(db, { runId, status: "failed", stopReason: "error", error: errorMessage(err), usage }).catch(() => {});
    emit("failed", { error: errorMessage(err) });
    throw err;
  } finally {
    clearTimeout(timer);
    release?.();
    opts.signal.removeEventListener("abort", onParentAbort);
    unregister();
  }

  function abortStatus(signal: AbortSignal): "timed_out" | "cancelled" {
    return signal.reason instanceof SubagentTimeoutError ? "timed_out" : "cancelled";
  }
  function abortFields() {
    const reason = controller.signal.reason;
    if (reason instanceof SubagentTimeoutError) return { stopReason: "timeout", error: reason.message };
    return cancelledFields();
  }
}
