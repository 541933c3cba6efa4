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
import type { SubagentUsage } from "@/lib/api/subagents";
import type { Db } from "@/server/db/client";
import { type Logger, log } from "@/server/log";
import { endAgentSpan, inSpan, startAgentSpan } from "@/server/telemetry";
import type { ResolvedModel } from "@/server/models/types";
import { registerLiveRun } from "@/server/runtime/run-registry";
import { type ApprovalRequest, approvalRequestsOf, recordLeadApprovals } from "./chat-approvals";
import { addStepUsage, NO_USAGE } from "./executor/usage";
import { toolChars, withPromptCache } from "./executor/prompt-cache";
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
  if (has("compare_batches"))
    modes.push(
      "- `compare_batches`: what changed between two runs of the same items (a batch and its variant: `batch_task` with `variant_of`): improved, regressed, each check, cost.",
    );
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
  /** The batch tools' facts, read beside the turn's own writes (LeadToolContext.batchFacts). */
  batchFacts?: LeadToolContext["batchFacts"];
  /** The lead run row when the caller created it with the thread's lock (leadRunRow); else created here. */
  runId?: string;
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

/** The lead run row's values (kind "lead", running, owned by this instance): the prompt is the last user message's text. */
export function leadRunRow(input: { userId: string; threadId: string; model: ResolvedModel; messages: ChatMessage[] }) {
  return {
    userId: input.userId,
    threadId: input.threadId,
    kind: "lead",
    definition: "lead",
    model: input.model.catalogName,
    prompt: lastUserText(input.messages),
    status: "running",
  } as const;
}

function lastUserText(messages: ChatMessage[]): string {
  const last = [...messages].reverse().find((m) => m.role === "user");
  return (last?.parts ?? [])
    .map((p) => (p.type === "text" ? p.text : ""))
    .join("\n")
    .trim();
}

/**
 * Creates the lead run row (leadRunRow), unless the caller did with the thread's lock, and
 * returns the handle that streams the response. The run id exists before the first chunk so
 * tools and the client can target it.
 */
export async function startLeadResponse(options: LeadResponseOptions): Promise<LeadRunHandle> {
  const runId = options.runId ?? (await createRun(options.db, leadRunRow(options))).id;
  const response = new LeadResponse(options, runId);
  let finished: Promise<ChatMessageMetadata> | undefined;
  return {
    runId,
    errorText: describeError,
    // The model calls and tool calls of the response are children of its invoke_agent span.
    execute: (writer) => inSpan(response.span, () => response.stream(writer)),
    finish: (outcome) => {
      finished ??= response.finish(outcome);
      return finished;
    },
  };
}

/** One lead response after its row exists: its stop controller, its span, the stream and the settlement. */
class LeadResponse {
  readonly span: ReturnType<typeof startAgentSpan>;
  private readonly runLog: Logger;
  // One controller per response: Stop (run registry) and the optional signal abort it.
  private readonly controller = new AbortController();
  private readonly unregister: () => void;
  private usage: SubagentUsage = NO_USAGE;
  private failure: unknown;
  // Calls the response ends on, waiting for a person: their rows exist before the thread is free.
  private readonly approvals: ApprovalRequest[] = [];
  // What their cards show besides the arguments (batch_task's estimate), filled by the tools.
  private readonly approvalDetails = new Map<string, unknown>();
  private readonly metadataBase: ChatMessageMetadata;

  constructor(
    private readonly options: LeadResponseOptions,
    private readonly runId: string,
  ) {
    const { model, threadId, signal } = options;
    this.span = startAgentSpan({ agent: "lead", model: model.name, threadId, runId });
    this.runLog = log.child({ run_id: runId, thread_id: threadId });
    if (signal?.aborted) this.controller.abort(signal.reason);
    else signal?.addEventListener("abort", this.onRequestAbort, { once: true });
    this.unregister = registerLiveRun(runId, this.controller);
    this.metadataBase = { runId, model: model.name, simulator: model.simulator };
  }

  private readonly onRequestAbort = () => this.controller.abort(this.options.signal?.reason);

  private recordApprovals(): Promise<unknown> {
    const { db, userId, threadId, config } = this.options;
    const timeoutSeconds = config.tools.approval_timeout_seconds;
    const details = this.approvalDetails;
    return recordLeadApprovals(db, { userId, threadId, runId: this.runId, requests: this.approvals, timeoutSeconds, details });
  }

  private addUsage(u: LanguageModelUsage | undefined): void {
    this.usage = addStepUsage(this.usage, u ?? {});
  }

  /** The toolset, then the model's stream merged into the writer. */
  async stream(writer: UIMessageStreamWriter<ChatMessage>): Promise<void> {
    const { db, config, userId, threadId, model, messages } = this.options;
    const ctx: LeadToolContext = {
      db,
      config,
      userId,
      threadId,
      runId: this.runId,
      model,
      abortSignal: this.controller.signal,
      writer: writer as UIMessageStreamWriter,
      approvalDetails: this.approvalDetails,
      batchFacts: this.options.batchFacts,
    };
    const tools: ToolSet = await buildLeadTools(ctx);
    const modelMessages = await convertToModelMessages(messages, { tools, ignoreIncompleteToolCalls: true });
    // The lead's system prompt and tools are the same every turn: marked for Anthropic's prompt cache when long enough.
    const sent = withPromptCache(
      { provider: model.entry.provider, modelId: model.name },
      { system: buildLeadSystemPrompt(config, Object.keys(tools)), messages: modelMessages, toolChars: () => toolChars(tools) },
    );
    const result = streamText({
      model: model.model,
      system: sent.system,
      messages: sent.messages,
      tools,
      stopWhen: stepCountIs(LEAD_MAX_STEPS),
      abortSignal: this.controller.signal,
      onStepFinish: async (step) => {
        this.addUsage(step.usage);
        const asked = approvalRequestsOf(step.content);
        if (asked.length === 0) return;
        this.approvals.push(...asked);
        await this.recordApprovals().catch((err) =>
          this.runLog.error({ err }, "could not record the approval requests; retried when the response ends"),
        );
      },
      onError: ({ error }) => {
        this.failure ??= error;
        this.runLog.warn({ err: describeError(error) }, "lead response failed");
      },
    });
    writer.merge(
      result.toUIMessageStream<ChatMessage>({
        sendStart: false,
        onError: describeError,
        messageMetadata: ({ part }) =>
          part.type === "finish"
            ? {
                ...this.metadataBase,
                usage: { inputTokens: part.totalUsage.inputTokens ?? 0, outputTokens: part.totalUsage.outputTokens ?? 0 },
              }
            : undefined,
      }),
    );
  }

  /** The run row's final status and usage (and any approval rows still unwritten); once per response. */
  async finish(outcome: { aborted: boolean; responseText: string; finishReason?: string }): Promise<ChatMessageMetadata> {
    const { failure, usage } = this;
    this.options.signal?.removeEventListener("abort", this.onRequestAbort);
    const aborted = outcome.aborted || this.controller.signal.aborted;
    const status = aborted ? "cancelled" : failure ? "failed" : "completed";
    try {
      await this.recordApprovals();
      await finishRun(this.options.db, {
        runId: this.runId,
        status,
        stopReason: aborted ? "stopped" : failure ? "error" : (outcome.finishReason ?? "stop"),
        result: outcome.responseText || null,
        error: status === "failed" ? describeError(failure) : aborted ? "stopped by the user" : null,
        usage,
      });
    } finally {
      this.unregister();
    }
    this.runLog.info({ status, ...usage }, "lead response finished");
    endAgentSpan(this.span, { status, usage, error: status === "failed" ? describeError(failure) : undefined });
    return { ...this.metadataBase, usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens }, status };
  }
}
