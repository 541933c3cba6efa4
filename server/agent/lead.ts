import {
  convertToModelMessages,
  type LanguageModelUsage,
  stepCountIs,
  streamText,
  type ToolSet,
  type UIMessageStreamWriter,
} from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { ChatMessage, ChatMessageMetadata } from "@/lib/api/chat";
import type { Db } from "@/server/db/client";
import { log } from "@/server/log";
import { endAgentSpan, inSpan, startAgentSpan } from "@/server/telemetry";
import type { ResolvedModel } from "@/server/models/types";
import { registerLiveRun } from "@/server/runtime/run-registry";
import { type ApprovalRequest, approvalRequestsOf, recordLeadApprovals } from "./chat-approvals";
import { createRun, finishRun } from "./runs";
import "./prompt-schema";
import { buildLeadTools, type LeadToolContext } from "./tools";
import { delegationPromptSection } from "./tools/task";

/**
 * The lead agent: its system prompt and the wiring of one response (a `lead` run row, the
 * toolset, streamText into the UI message stream, and the run's final status and usage).
 */

/** Model steps per response: tool calls plus the answer that follows them. */
export const LEAD_MAX_STEPS = 12;

/** The lead agent's instructions. States the single resolved task concurrency and only the tools it really has. */
export function buildLeadSystemPrompt(config: FlotillaConfig, toolNames: readonly string[] = []): string {
  const has = (name: string) => toolNames.includes(name);
  const lines = [
    "You are the lead agent of Flotilla, an agent gateway. You talk with the user, answer directly when you can,",
    "and delegate to sub-agents when work is large, parallel or specialised.",
  ];
  const modes: string[] = [];
  if (has("task"))
    modes.push("- `task`: one specialist result you wait for; give it a short description and a complete prompt.");
  if (has("agent_swarm"))
    modes.push(
      `- \`agent_swarm\`: 1..${config.swarm.max_items} independent items run in the foreground; you receive the ordered results and write one synthesis.`,
    );
  if (has("batch_task"))
    modes.push(
      `- \`batch_task\`: a durable background batch of up to ${config.subagent_batches.max_items_per_batch} independent items, executed by workers; it returns a receipt at once. Do not wait for it in this response.`,
    );
  if (has("batch_status")) modes.push("- `batch_status`: progress and counts of the thread's batches.");
  if (has("batch_results"))
    modes.push("- `batch_results`: bounded pages of a batch's item results, for a synthesis once it has settled.");
  if (modes.length) lines.push("", "Delegation tools:", ...modes);
  if (has("task")) lines.push("", delegationPromptSection(config));
  lines.push("", "Be concise. Never invent results of work that has not run.");
  return lines.join("\n");
}

export interface LeadResponseOptions {
  db: Db;
  config: FlotillaConfig;
  model: ResolvedModel;
  userId: string;
  threadId: string;
  /** The conversation so far, ending with the new user message. */
  messages: ChatMessage[];
  /** An extra abort source; Stop always works through the run registry. Never the HTTP request: responses outlive it. */
  signal?: AbortSignal;
}

export interface LeadRunHandle {
  runId: string;
  /** Streams the lead agent's reply into the writer (returns once the model stream is merged). */
  execute(writer: UIMessageStreamWriter<ChatMessage>): Promise<void>;
  /** Finalizes the run row; call once with what the stream ended as. Idempotent. */
  finish(outcome: { aborted: boolean; responseText: string; finishReason?: string }): Promise<ChatMessageMetadata>;
  /** Model-facing error text for the UI stream (short, no stack). */
  errorText(error: unknown): string;
}

function describeError(error: unknown): string {
  const message = error instanceof Error ? error.message : typeof error === "string" ? error : "unknown error";
  const oneLine = message.replace(/\s+/g, " ").trim();
  return oneLine.length > 500 ? `${oneLine.slice(0, 499)}…` : oneLine;
}

function lastUserText(messages: ChatMessage[]): string {
  const last = [...messages].reverse().find((m) => m.role === "user");
  return (last?.parts ?? [])
    .map((p) => (p.type === "text" ? p.text : ""))
    .join("\n")
    .trim();
}

/**
 * Creates the lead run row (kind "lead", running, owned by this instance) and returns the
 * handle that streams the response. The run id exists before the first chunk so tools and
 * the client can target it.
 */
export async function startLeadResponse(options: LeadResponseOptions): Promise<LeadRunHandle> {
  const { db, config, model, userId, threadId, messages } = options;
  const run = await createRun(db, {
    userId,
    threadId,
    kind: "lead",
    definition: "lead",
    model: model.catalogName,
    prompt: lastUserText(messages),
    status: "running",
  });
  const runId = run.id;
  const span = startAgentSpan({ agent: "lead", model: model.name, threadId, runId });
  const runLog = log.child({ run_id: runId, thread_id: threadId });

  // One controller per response: Stop (run registry) and the optional signal abort it.
  const controller = new AbortController();
  const onRequestAbort = () => controller.abort(options.signal?.reason);
  if (options.signal?.aborted) controller.abort(options.signal.reason);
  else options.signal?.addEventListener("abort", onRequestAbort, { once: true });
  const unregister = registerLiveRun(runId, controller);

  const usage = { inputTokens: 0, outputTokens: 0 };
  let failure: unknown;
  let finished: Promise<ChatMessageMetadata> | undefined;

  // Calls the response ends on, waiting for a person: their rows exist before the thread is free.
  const approvals: ApprovalRequest[] = [];
  const recordApprovals = () =>
    recordLeadApprovals(db, { userId, threadId, runId, requests: approvals, timeoutSeconds: config.tools.approval_timeout_seconds });
  const addUsage = (u: LanguageModelUsage | undefined) => {
    usage.inputTokens += u?.inputTokens ?? 0;
    usage.outputTokens += u?.outputTokens ?? 0;
  };

  const metadataBase: ChatMessageMetadata = { runId, model: model.name, simulator: model.simulator };

  const handle: LeadRunHandle = {
    runId,
    errorText: describeError,
    async execute(writer) {
      const ctx: LeadToolContext = {
        db,
        config,
        userId,
        threadId,
        runId,
        model,
        abortSignal: controller.signal,
        writer: writer as UIMessageStreamWriter,
      };
      const tools: ToolSet = await buildLeadTools(ctx);
      const modelMessages = await convertToModelMessages(messages, { tools, ignoreIncompleteToolCalls: true });
      const result = streamText({
        model: model.model,
        system: buildLeadSystemPrompt(config, Object.keys(tools)),
        messages: modelMessages,
        tools,
        stopWhen: stepCountIs(LEAD_MAX_STEPS),
        abortSignal: controller.signal,
        onStepFinish: async (step) => {
          addUsage(step.usage);
          const asked = approvalRequestsOf(step.content);
          if (asked.length === 0) return;
          approvals.push(...asked);
          await recordApprovals().catch((err) => runLog.error({ err }, "could not record the approval requests; retried when the response ends"));
        },
        onError: ({ error }) => {
          failure ??= error;
          runLog.warn({ err: describeError(error) }, "lead response failed");
        },
      });
      writer.merge(
        result.toUIMessageStream<ChatMessage>({
          sendStart: false,
          onError: describeError,
          messageMetadata: ({ part }) =>
            part.type === "finish"
              ? {
                  ...metadataBase,
                  usage: { inputTokens: part.totalUsage.inputTokens ?? 0, outputTokens: part.totalUsage.outputTokens ?? 0 },
                }
              : undefined,
        }),
      );
    },
    finish(outcome) {
      finished ??= (async () => {
        options.signal?.removeEventListener("abort", onRequestAbort);
        const aborted = outcome.aborted || controller.signal.aborted;
        const status = aborted ? "cancelled" : failure ? "failed" : "completed";
        try {
          await recordApprovals();
          await finishRun(db, {
            runId,
            status,
            stopReason: aborted ? "stopped" : failure ? "error" : (outcome.finishReason ?? "stop"),
            result: outcome.responseText || null,
            error: status === "failed" ? describeError(failure) : aborted ? "stopped by the user" : null,
            usage,
          });
        } finally {
          unregister();
        }
        runLog.info({ status, ...usage }, "lead response finished");
        endAgentSpan(span, { status, usage, error: status === "failed" ? describeError(failure) : undefined });
        return { ...metadataBase, usage: { ...usage }, status };
      })();
      return finished;
    },
  };
  // The model calls and tool calls of the response are children of its invoke_agent span.
  return { ...handle, execute: (writer) => inSpan(span, () => handle.execute(writer)) };
}
