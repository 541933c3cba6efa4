import { type ModelMessage, type ToolExecutionOptions, type ToolSet, tool } from "ai";
import { effectiveTaskConcurrency, type FlotillaConfig } from "@/lib/config";
import type { SubagentRuntime } from "@/server/runtime/admission";
import { isCapacityError } from "@/server/runtime/capacity";
import type { Db } from "@/server/db/client";
import {
  type BackgroundReceipt,
  isBackgroundReceipt,
  type SubagentDataPart,
  type SubagentStatusUpdate,
  type TaskInput,
  type TaskNotRunReason,
  type TaskToolOutput,
  taskInputSchema,
} from "@/lib/api/subagents";
import { settledChild, startBackground } from "../background";
import { type DelegatingRun, type RunSubagentOptions, runSubagent } from "../executor";
import { textWithOutput } from "@/lib/api/model-facts";
import { describeSubagents, listSubagents, resolveSubagent } from "../registry";
import type { LeadToolContext } from "./context";

/**
 * `task`: ordinary delegation. The lead waits for the sub-agent's result. Three limits meet
 * here, all stated in the lead prompt (delegationPromptSection):
 * - per response: effectiveTaskConcurrency(config) calls of one model response run; later
 *   calls of the same response are not run and the model is told so;
 * - per run: subagents.max_total_per_run delegations per lead run;
 * - the executor's admission (response lane, thread lane, process capacity).
 */

export type { BackgroundReceipt, SubagentDataPart, TaskInput, TaskNotRunReason, TaskToolOutput };
export { taskInputSchema };

export interface TaskToolContext extends Omit<LeadToolContext, "writer"> {
  writer?: LeadToolContext["writer"];
  /** Root of the delegation tree; defaults to runId (a lead run is its own root). */
  rootRunId?: string;
  /** Depth of the caller: 0 for the lead, n for a nested sub-agent. */
  depth?: number;
  runtime?: SubagentRuntime;
}

/** The lead prompt's paragraph about delegation, with the same numbers the tool enforces. */
export function delegationPromptSection(config: FlotillaConfig): string {
  if (!config.subagents.enabled) return "";
  const perResponse = effectiveTaskConcurrency(config);
  const total = config.subagents.max_total_per_run;
  return [
    "## Delegating with `task`",
    "Use `task` to hand a self-contained piece of work to a sub-agent and wait for its result. Sub-agents " +
      "see only the prompt you give them, so include every fact and instruction they need.",
    `- At most ${perResponse} \`task\` call${perResponse === 1 ? "" : "s"} per response run (in parallel). ` +
      "Extra task calls in the same response are not run; issue them in a later response if still needed.",
    `- At most ${total} task${total === 1 ? "" : "s"} in total while answering one message. Do not delegate ` +
      "trivial steps; do the rest yourself.",
    "- For many independent items use agent_swarm or batch_task instead of many task calls.",
    "- `background: true` (task or agent_swarm) when the work is long and the user need not wait for it in this " +
      "answer: the call returns at once, the sub-agents run on with the same limits and Stop still stops them, and " +
      "when the last of them settles you are started again in this thread with their results. Do not poll or repeat " +
      "it. Wait in the foreground when your answer depends on the result.",
    config.subagents.max_depth > 1
      ? `- Sub-agents may delegate further, up to ${config.subagents.max_depth} levels below you, sharing ` +
        `${config.subagents.max_active_per_root} active sub-agents per message; requests beyond that are refused at once.`
      : "- Sub-agents cannot delegate further.",
    "Available sub-agents:",
    describeSubagents(config),
  ].join("\n");
}

function toModelText(output: TaskToolOutput, description: string): string {
  if (output.status === "not_run") return `Task "${description}" was not run. ${output.error ?? ""}`.trim();
  const head = `Sub-agent "${output.definition}" (run ${output.runId}) ${output.status.replace("_", " ")}`;
  if (output.status === "completed") return `${head}. Result:\n${output.result}`;
  return `${head}: ${output.error ?? output.stopReason ?? "no result"}. No result is available from this task.`;
}

/** What the model reads of a background call's receipt (task or agent_swarm). */
export function backgroundModelOutput(receipt: BackgroundReceipt, what: string) {
  const n = receipt.run_ids.length;
  const text =
    `${what} started in the background (${n === 1 ? "run" : `${n} runs`} ${receipt.run_ids.join(", ")}). ` +
    "It runs on after this response; when it has settled you are started again in this thread with the results. " +
    "Do not wait for it, poll it or start it again: tell the user briefly that it runs in the background.";
  return textWithOutput("background", text, receipt);
}

/** What the model reads of a task result: the text above, with the typed output beside it. */
export function taskModelOutput(output: TaskToolOutput | BackgroundReceipt, description: string) {
  if (isBackgroundReceipt(output)) return backgroundModelOutput(output, `Task "${description}"`);
  return textWithOutput("task", toModelText(output, description), output);
}

export function createTaskTool(ctx: TaskToolContext) {
  const perResponse = effectiveTaskConcurrency(ctx.config);
  const maxTotal = ctx.config.subagents.max_total_per_run;
  // Calls of one model response share the same `messages` array (the step's input), so it
  // identifies the response; calls run in the order the model emitted them.
  const perStep = new WeakMap<ModelMessage[], { seen: number; kept: string[] }>();
  const fallbackStep: ModelMessage[] = [];
  let started = 0;
  const names = listSubagents(ctx.config).map((d) => d.name);

  return tool({
    description:
      "Delegate one self-contained task to a sub-agent and wait for its result (background: true lets it run on " +
      "after this response; you are started again with its result). " +
      `At most ${perResponse} per response and ${maxTotal} per run. Sub-agents: ${names.join(", ")}.`,
    inputSchema: taskInputSchema,
    execute: async (input, options): Promise<TaskToolOutput | BackgroundReceipt> => {
      // Bookkeeping happens synchronously, before any await, so call order decides.
      const key = options.messages ?? fallbackStep;
      const step = perStep.get(key) ?? { seen: 0, kept: [] };
      perStep.set(key, step);
      const position = ++step.seen;
      const kept = step.kept;
      if (!names.includes(input.subagent))
        return notRunOutput(input, "invalid", `Unknown sub-agent "${input.subagent}". Available: ${names.join(", ")}.`);
      if (kept.length >= perResponse)
        return notRunOutput(
          input,
          "response_limit",
          `This response made more task calls than the limit of ${perResponse} per response, so this one ` +
            `(call ${position}) was dropped. The first ${perResponse} ran: ${kept.map((d) => `"${d}"`).join(", ")}. ` +
            "Issue the dropped task again in a later response if it is still needed.",
        );
      if (started >= maxTotal)
        return notRunOutput(
          input,
          "run_total",
          `The limit of ${maxTotal} delegated tasks per run (subagents.max_total_per_run) is used up, so no more ` +
            "tasks can run while answering this message. Finish the remaining work yourself from the results you " +
            "have, and tell the user what is left.",
        );
      kept.push(input.description);
      started++;

      return runTask(ctx, input, options);
    },
    toModelOutput: ({ output, input }) => taskModelOutput(output, input.description),
  });
}

/** A task call that did not run, saying why (the model reads `error`). */
function notRunOutput(input: TaskInput, reason: TaskNotRunReason, message: string): TaskToolOutput {
  return {
    runId: null,
    status: "not_run",
    definition: input.subagent,
    model: null,
    usage: { inputTokens: 0, outputTokens: 0 },
    durationMs: 0,
    stopReason: null,
    result: "",
    error: message,
    notRunReason: reason,
  };
}

/** Runs one admitted task call: in the background (the lead's, on request) or to its result. */
async function runTask(ctx: TaskToolContext, input: TaskInput, options: ToolExecutionOptions): Promise<TaskToolOutput | BackgroundReceipt> {
  const callerDepth = ctx.depth ?? 0;
  const signal = options.abortSignal ? AbortSignal.any([ctx.abortSignal, options.abortSignal]) : ctx.abortSignal;
  const write = (update: SubagentStatusUpdate) => {
    const data: SubagentDataPart = { ...update, toolCallId: options.toolCallId, description: input.description };
    ctx.writer?.write({ type: "data-subagent", id: update.runId, data });
  };
  let runId: string | null = null;
  const { definition, model } = resolveSubagent(ctx.config, input.subagent, ctx.model);
  const child: Omit<RunSubagentOptions, "signal"> = {
    userId: ctx.userId,
    threadId: ctx.threadId || undefined,
    parentRunId: ctx.runId,
    rootRunId: ctx.rootRunId ?? ctx.runId,
    kind: "task",
    definition,
    prompt: input.prompt,
    model,
    depth: callerDepth + 1,
    toolCallId: options.toolCallId,
    runtime: ctx.runtime,
    delegate: nestedDelegation(ctx),
  };
  // Only the lead delegates in the background (a sub-agent's task runs in its own foreground).
  if (input.background && callerDepth === 0 && ctx.threadId)
    return startBackground(ctx.db, {
      userId: ctx.userId,
      threadId: ctx.threadId,
      leadRunId: ctx.runId,
      toolCallId: options.toolCallId,
      tool: "task",
      children: [child],
      leadSignal: signal,
      run: async (bgSignal, [id]) => {
        const result = await runSubagent(ctx.db, { ...child, runId: id, signal: bgSignal });
        return [settledChild({ run_id: result.runId, definition: result.definition, status: result.status, result: result.text, error: result.error })];
      },
    });
  try {
    const result = await runSubagent(ctx.db, {
      ...child,
      signal,
      onCreated: (id) => {
        runId = id;
      },
      onStatus: write,
    });
    return {
      runId: result.runId,
      status: result.status,
      definition: result.definition,
      model: result.model,
      usage: result.usage,
      durationMs: result.durationMs,
      stopReason: result.stopReason,
      result: result.text,
      ...(result.error !== undefined ? { error: result.error } : {}),
    };
  } catch (err) {
    if (!isCapacityError(err)) throw err;
    // Refused at admission: the run row is final (failed) and the model learns why.
    return {
      ...notRunOutput(input, "capacity", err.message),
      runId,
      status: runId ? "failed" : "not_run",
      stopReason: err.code,
    };
  }
}

/**
 * What a sub-agent may delegate through: `task` alone (never agent_swarm or batch_task), and
 * only while subagents.max_depth leaves a level below it.
 */
export function nestedDelegation(base: { db: Db; userId: string; threadId?: string | null }) {
  return (run: DelegatingRun): ToolSet => {
    if (run.depth >= run.runtime.config.subagents.max_depth) return {};
    return {
      task: createTaskTool({
        db: base.db,
        config: run.runtime.config,
        userId: base.userId,
        threadId: base.threadId ?? "",
        runId: run.runId,
        rootRunId: run.rootRunId,
        depth: run.depth,
        model: run.model,
        abortSignal: run.signal,
        runtime: run.runtime,
      }),
    };
  };
}
