import { randomBytes } from "node:crypto";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import type { ModelMessage, StepResult, ToolSet } from "ai";
import { answerWithModel, askModel, type ModelCall } from "@/server/agent/executor/model-call";
import type { PromptCache } from "@/server/agent/executor/prompt-cache";
import { addStepUsage, NO_USAGE } from "@/server/agent/executor/usage";
import { typedOutput } from "@/server/agent/structured-output";
import type { SubagentUsage } from "@/lib/api/subagents";
import { batchSharedPrefix } from "@/server/batches/examples";
import type { BatchProvider } from "@/server/batches/provider-lane/store";
import { type ExecutionSpec, snapshotDefinition } from "@/server/batches/spec";
import type { CatalogEntry } from "@/server/models/catalog";
import { providerModel, withModelMiddleware } from "@/server/models/index";
import { classifyModelError } from "@/server/runtime/model-errors";
import { errorText } from "@/server/errors";

/**
 * A provider batch's requests are built by the live executor's own model call stage
 * (askModel: the same system prompt, typed-output instructions and response format, the same
 * messages) on the provider's AI SDK model, whose transport hands the request body back
 * instead of sending it. An answer is read back the same way: the result's body is given to the
 * same model call as the response of its first request (answerWithModel), so typed results are
 * read and validated exactly as live; a repair turn goes to the live model.
 */

type Fetch = typeof globalThis.fetch;

/** What a capture answers: an empty reply in the provider's shape, so the call ends normally. */
function emptyReply(provider: BatchProvider, model: string): unknown {
  return provider === "openai"
    ? {
        id: "capture",
        object: "chat.completion",
        created: 0,
        model,
        choices: [{ index: 0, message: { role: "assistant", content: "" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
      }
    : {
        id: "capture",
        type: "message",
        role: "assistant",
        model,
        content: [{ type: "text", text: "" }],
        stop_reason: "end_turn",
        usage: { input_tokens: 0, output_tokens: 0 },
      };
}

/**
 * The entry's model as the live resolver builds it (server/models/index.ts: the provider's AI SDK
 * model and its own middleware, such as the loose JSON schema), on a transport of our own; without
 * the shared rate-limit middleware, since nothing is sent live.
 */
function transportModel(entry: CatalogEntry, fetch: Fetch): LanguageModelV3 {
  const own = providerModel(entry, fetch);
  return withModelMiddleware(own.model, own.middleware);
}

const json = (body: unknown) => new Response(JSON.stringify(body), { status: 200, headers: { "content-type": "application/json" } });

/**
 * The prompt cache as a live item of the batch uses it (server/worker/execute.ts): the shared
 * prefix (the examples and the template's text before its first placeholder) marked for Anthropic, which also caches within a Message Batch, and OpenAI's
 * `prompt_cache_key`.
 */
export function lanePromptCache(entry: CatalogEntry, spec: ExecutionSpec, batchId: string): PromptCache {
  return { provider: entry.provider, modelId: entry.model, key: `flotilla:${batchId}`, sharedPrefix: batchSharedPrefix(spec) };
}

/** The model call of an item as the live executor makes it (no tools: the lane allows none). */
function itemCall(
  spec: ExecutionSpec,
  model: LanguageModelV3,
  signal: AbortSignal,
  onStep: ModelCall["onStep"],
  promptCache: PromptCache,
): ModelCall {
  const def = snapshotDefinition(spec);
  return {
    promptCache,
    model,
    system: def.systemPrompt,
    tools: {},
    typed: def.outputSchema ? typedOutput(def.outputSchema) : undefined,
    turnsLeft: def.maxTurns,
    signal,
    progress: { transcript: [] },
    onStep,
  };
}

const userMessage = (prompt: string): ModelMessage[] => [{ role: "user", content: prompt }];

/**
 * Builds the request body of each prompt, one at a time (the transport holds one body at a time).
 * The items of a batch differ only in their prompt's text after the shared prefix, so the model
 * call stage builds one body with a marker there, and each item's body is that text with the
 * marker replaced by its own (JSON-escaped): a model call through the AI SDK per item, with its
 * garbage, was about 0.4 ms of CPU (bench: 1.29 ms an item before, 0.75 after, 10,000 items). Each builder checks the template against the
 * model call stage on its first VERIFIED items and uses the stage itself for any prompt the
 * template cannot take, or for all of them if a check ever differs.
 */
export function requestBuilder(provider: BatchProvider, entry: CatalogEntry, spec: ExecutionSpec, promptCache: PromptCache) {
  let captured: string | undefined;
  const reply = emptyReply(provider, entry.model);
  const fetch: Fetch = async (_url, init) => {
    captured = String(init?.body ?? "{}");
    return json(reply);
  };
  const model = transportModel(entry, fetch);
  const signal = new AbortController().signal;
  const viaModelCall = async (prompt: string): Promise<string> => {
    captured = undefined;
    await askModel(itemCall(spec, model, signal, () => {}, promptCache), userMessage(prompt), false);
    if (captured === undefined) throw new Error("the model call sent no request");
    return captured;
  };

  const prefix = promptCache.sharedPrefix ?? "";
  const marker = `flotillaitem${randomBytes(12).toString("hex")}`;
  /** The body's text around the marker; null when the template is not used (yet undefined: not built). */
  let template: [string, string] | null | undefined;
  let verified = 0;
  const fromTemplate = (prompt: string): string | null => {
    if (!template || !prompt.startsWith(prefix) || prompt.length === prefix.length) return null;
    return template[0] + JSON.stringify(prompt.slice(prefix.length)).slice(1, -1) + template[1];
  };
  return async (prompt: string): Promise<Record<string, unknown>> => {
    if (template === undefined) {
      const parts = (await viaModelCall(prefix + marker)).split(marker);
      template = parts.length === 2 ? [parts[0]!, parts[1]!] : null;
    }
    const built = fromTemplate(prompt);
    if (built !== null && verified >= VERIFIED) return JSON.parse(built) as Record<string, unknown>;
    const body = await viaModelCall(prompt);
    if (built !== null) {
      if (built === body) verified++;
      else template = null;
    }
    return JSON.parse(body) as Record<string, unknown>;
  };
}

/** Items whose templated body must equal the model call stage's before the template alone builds them. */
const VERIFIED = 2;

/** An answer read from a provider batch's result, as the live model call would have ended. */
export interface ReadAnswer {
  status: "completed" | "failed";
  text: string;
  output?: unknown;
  typed: boolean;
  stopReason: string;
  error?: string;
  errorClass?: string;
  /** Every step's tokens (a repair turn's included). */
  usage: SubagentUsage;
  /** The tokens of the batch's own response (priced at the batch discount). */
  batchUsage: SubagentUsage;
}

/**
 * Reads each result body through the model call stage. `live` serves any call after the first
 * (the repair turn of a typed answer that did not validate). One answer at a time.
 */
export function answerReader(entry: CatalogEntry, spec: ExecutionSpec, live: LanguageModelV3, promptCache: PromptCache) {
  let body: unknown;
  const fetch: Fetch = async () => json(body);
  const replayed = transportModel(entry, fetch);
  return async (args: { prompt: string; body: unknown; signal: AbortSignal }): Promise<ReadAnswer> => {
    body = args.body;
    let first = true;
    let usage = NO_USAGE;
    let batchUsage = NO_USAGE;
    const model: LanguageModelV3 = {
      specificationVersion: "v3",
      provider: live.provider,
      modelId: live.modelId,
      supportedUrls: live.supportedUrls,
      doGenerate: (o) => {
        if (!first) return live.doGenerate(o);
        first = false;
        return replayed.doGenerate(o);
      },
      doStream: (o) => live.doStream(o),
    };
    const onStep = (step: StepResult<ToolSet>) => {
      if (usage === NO_USAGE) batchUsage = addStepUsage(NO_USAGE, step.usage);
      usage = addStepUsage(usage, step.usage);
    };
    try {
      const outcome = await answerWithModel(itemCall(spec, model, args.signal, onStep, promptCache), userMessage(args.prompt));
      switch (outcome.kind) {
        case "answered":
          return { status: "completed", text: outcome.answer.text, output: outcome.output, typed: outcome.typed, stopReason: outcome.answer.stopReason, usage, batchUsage };
        case "invalid_output":
          return { status: "failed", text: outcome.answer.text, typed: true, stopReason: "invalid_output", error: `invalid_output: ${outcome.errors}`, errorClass: "invalid_output", usage, batchUsage };
        default:
          return { status: "failed", text: "", typed: false, stopReason: "error", error: "the answer could not be read", usage, batchUsage };
      }
    } catch (err) {
      return { status: "failed", text: "", typed: false, stopReason: "error", error: errorText(err), errorClass: classifyModelError(err), usage, batchUsage };
    }
  };
}
