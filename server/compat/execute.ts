import { generateText, jsonSchema, type ModelMessage, NoObjectGeneratedError, Output } from "ai";
import { eq, sql } from "drizzle-orm";
import { runSubagent } from "@/server/agent/executor";
import { resolveSubagent } from "@/server/agent/registry";
import type { Db } from "@/server/db/client";
import { compatBatches, compatRequests } from "@/server/db/schema";
import { classifyModelError } from "@/server/runtime/model-errors";
import { resolveModel, resolveModelByName } from "@/server/models/index";
import type { ResolvedModel } from "@/server/models/types";
import { admit, type SubagentRuntime } from "@/server/runtime/admission";
import { endpointBackoffMs } from "@/server/runtime/rate-limit";
import type { ItemExecutor, ItemRunResult } from "@/server/batches/item-executor";
import { expireCompatBatches } from "./expiry";
import { type CompatRequest, type CompatResponseFormat, SUBAGENT_MODEL_PREFIX } from "./requests";
import { errorText } from "@/server/errors";
import { readTypedAnswer, repairRequest, typedOutput } from "@/server/agent/structured-output";
import { prepareOutputSchema } from "@/server/runtime/output-schema";
import { callTokenCount, INVALID_USAGE_ERROR, outOfRange, tokenCount } from "@/lib/api/subagents";

/**
 * Runs one item of a compatible batch: its stored request (server/compat/requests.ts) goes to
 * the catalog model it names with its own system prompt, messages, temperature, max tokens and
 * stop sequences; `flotilla:<sub-agent>` runs it as that sub-agent (its tools included) through
 * the shared executor. Same contract as every item executor: capacity first, onStarted right
 * before the model call, the signal honoured; a capacity refusal throws (the item is released).
 * The completion window is checked here too: a batch whose window has passed is expired
 * before another of its requests starts (the same explicit step the HTTP readers take first:
 * server/compat/expiry.ts).
 *
 * A `response_format` asks for JSON: the model gets it as the AI SDK's JSON response format (the
 * provider's JSON mode; with a schema, its JSON-schema mode), the answer is validated (Ajv) and
 * gets one repair turn quoting the errors, as a typed batch item does (a sub-agent runs with the
 * format as its output schema); still invalid, the request fails with `invalid_output: ...`.
 */

const NO_USAGE: { inputTokens: number; outputTokens: number; outOfRange?: boolean } = { inputTokens: 0, outputTokens: 0 };
/** `json_object`: any JSON object. */
const ANY_OBJECT = { type: "object" };

/** The output schema a response format stands for. */
const formatSchema = (format: CompatResponseFormat) => (format.type === "json_schema" ? format.schema : ANY_OBJECT);

/** What the catalog model is asked for: the AI SDK output (its response format), the validator, the system prompt's statement. */
function jsonAnswer(format: CompatResponseFormat) {
  // The request's own name for its format goes to the provider (OpenAI requires one).
  if (format.type === "json_schema")
    return { ...typedOutput(format.schema), output: Output.object({ schema: jsonSchema(format.schema), name: format.name }) };
  return {
    schema: prepareOutputSchema(ANY_OBJECT),
    output: Output.json(),
    instructions: "Your answer must be exactly one JSON object, with no other text.",
  };
}

/** A sub-agent takes one prompt: the conversation as text. */
function subagentPrompt(request: CompatRequest): string {
  const parts = request.system ? [`System: ${request.system}`] : [];
  if (request.messages.length === 1) return [...parts, request.messages[0]!.content].join("\n\n");
  for (const m of request.messages) parts.push(`${m.role === "user" ? "User" : "Assistant"}: ${m.content}`);
  return parts.join("\n\n");
}

export function compatItemExecutor(args: { db: Db; model?: ResolvedModel; runtime: SubagentRuntime }): ItemExecutor {
  const { db, runtime } = args;
  return async ({ item, spec, signal, onStarted }) => {
    const [row] = await db
      .select({
        body: compatRequests.body,
        compatId: compatBatches.id,
        api: compatBatches.api,
        userId: compatBatches.userId,
        due: sql<boolean>`${compatBatches.expiresAt} <= now()`,
      })
      .from(compatRequests)
      .innerJoin(compatBatches, eq(compatBatches.batchId, item.batchId))
      .where(eq(compatRequests.itemId, item.id));
    if (!row) return failed(null, "the request of this item is missing");
    if (row.due) {
      // No request starts after the completion window: expire the batch (its unfinished items
      // are cancelled, this one included, so whatever is returned here is fenced out).
      await expireCompatBatches(db, { userId: row.userId, api: row.api, id: row.compatId });
      return { ...failed(null, "the batch's completion window has passed"), status: "cancelled" };
    }
    const request = row.body as unknown as CompatRequest;

    if (request.model.startsWith(SUBAGENT_MODEL_PREFIX)) {
      // A sub-agent runs on its definition's model, else this process's default.
      const { definition, model: subagentModel } = resolveSubagent(
        runtime.config,
        request.model.slice(SUBAGENT_MODEL_PREFIX.length),
        args.model ?? resolveModel(runtime.config),
      );
      const result = await runSubagent(db, {
        userId: spec.caller.user_id,
        threadId: spec.caller.thread_id,
        kind: "batch_item",
        definition: request.response_format ? { ...definition, outputSchema: formatSchema(request.response_format) } : definition,
        prompt: subagentPrompt(request),
        model: subagentModel,
        signal,
        runtime,
        onStarted,
      });
      return {
        status: result.status,
        text: result.text,
        usage: result.usage,
        model: request.model,
        stopReason: result.stopReason,
        error: result.error,
        errorClass: result.errorClass,
        runId: result.runId,
        ...(result.output !== undefined ? { output: result.output } : {}),
        retryAfterMs: result.errorClass === "rate_limit" ? endpointBackoffMs(subagentModel.endpoint) : undefined,
      };
    }

    let model: ResolvedModel;
    try {
      model = resolveModelByName(runtime.config, request.model);
    } catch (err) {
      // Validated at submission; this worker's catalog may still lack it (a clear failure, no fallback).
      return failed(request.model, errorText(err));
    }
    let json: ReturnType<typeof jsonAnswer> | undefined;
    try {
      json = request.response_format ? jsonAnswer(request.response_format) : undefined;
    } catch (err) {
      return failed(request.model, errorText(err)); // compiled at upload; a change of validator could still refuse it
    }
    const release = await admit(runtime, { kind: "batch_item", depth: 1, signal });
    const timeout = AbortSignal.timeout(runtime.config.subagents.timeout_seconds * 1000);
    const callSignal = AbortSignal.any([signal, timeout]);
    let usage = NO_USAGE;
    // One model call. A JSON answer that does not parse makes the AI SDK throw; it is read like any other answer.
    const ask = async (messages: ModelMessage[]) => {
      try {
        const result = await generateText({
          model: model.model,
          system: json ? [request.system, json.instructions].filter(Boolean).join("\n\n") : request.system,
          messages,
          temperature: request.temperature,
          topP: request.top_p,
          maxOutputTokens: request.max_tokens,
          stopSequences: request.stop,
          ...(json ? { output: json.output } : {}),
          abortSignal: callSignal,
        });
        usage = addUsage(usage, result.totalUsage);
        return { text: result.text, stopReason: result.finishReason as string };
      } catch (err) {
        if (!json || !NoObjectGeneratedError.isInstance(err) || callSignal.aborted) throw err;
        usage = addUsage(usage, err.usage);
        return { text: err.text ?? "", stopReason: (err.finishReason ?? "stop") as string };
      }
    };
    try {
      await onStarted();
      let answer = await ask(request.messages);
      const done = (fields: Partial<ItemRunResult>): ItemRunResult =>
        usage.outOfRange
          ? { status: "failed", text: "", usage, model: request.model, stopReason: "invalid_usage", error: INVALID_USAGE_ERROR, errorClass: "invalid_usage" }
          : { status: "completed", text: answer.text, usage, model: request.model, stopReason: answer.stopReason, ...fields };
      if (!json) return done({});
      let read = await readTypedAnswer(answer.text, json.schema, "response_format");
      if (!read.ok && !read.final) {
        // Exactly one repair turn, quoting the validator's errors.
        const repair: ModelMessage[] = [...request.messages, { role: "assistant", content: answer.text }, repairRequest(read.errors)];
        answer = await ask(repair);
        read = await readTypedAnswer(answer.text, json.schema, "response_format");
      }
      if (!read.ok)
        return done({ status: "failed", stopReason: "invalid_output", error: `invalid_output: ${read.errors}`, errorClass: "invalid_output" });
      // The content is the value as compact JSON: no code fence, no text around it.
      return done({ text: JSON.stringify(read.value), output: read.value });
    } catch (err) {
      if (timeout.aborted && !signal.aborted)
        return { ...failed(request.model, "the request did not finish within subagents.timeout_seconds"), status: "timed_out" };
      if (signal.aborted) return { ...failed(request.model, errorText(signal.reason ?? "cancelled")), status: "cancelled" };
      const errorClass = classifyModelError(err);
      return {
        ...failed(request.model, errorText(err)),
        errorClass,
        retryAfterMs: errorClass === "rate_limit" ? endpointBackoffMs(model.endpoint) : undefined,
      };
    } finally {
      release();
    }
  };
}

function addUsage(
  sum: { inputTokens: number; outputTokens: number; outOfRange?: boolean },
  u: { inputTokens?: number | undefined; outputTokens?: number | undefined } | undefined,
) {
  // A count out of range (1e30, negative, NaN) counts nothing, and the answer is refused (execute).
  const invalid = sum.outOfRange === true || outOfRange(u?.inputTokens) || outOfRange(u?.outputTokens);
  return {
    ...(invalid ? { outOfRange: true } : {}),
    inputTokens: tokenCount(sum.inputTokens + callTokenCount(u?.inputTokens)),
    outputTokens: tokenCount(sum.outputTokens + callTokenCount(u?.outputTokens)),
  };
}

function failed(model: string | null, error: string): ItemRunResult {
  return { status: "failed", text: "", usage: NO_USAGE, model, stopReason: "error", error };
}
