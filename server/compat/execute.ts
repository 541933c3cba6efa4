import { generateText } from "ai";
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
import { type CompatRequest, SUBAGENT_MODEL_PREFIX } from "./requests";
import { errorText } from "@/server/errors";

/**
 * Runs one item of a compatible batch: its stored request (server/compat/requests.ts) goes to
 * the catalog model it names with its own system prompt, messages, temperature, max tokens and
 * stop sequences; `flotilla:<sub-agent>` runs it as that sub-agent (its tools included) through
 * the shared executor. Same contract as every item executor: capacity first, onStarted right
 * before the model call, the signal honoured; a capacity refusal throws (the item is released).
 * The completion window is checked here too: a batch whose window has passed is expired
 * before another of its requests starts (the same explicit step the HTTP readers take first:
 * server/compat/expiry.ts).
 */

const NO_USAGE = { inputTokens: 0, outputTokens: 0 };


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
        definition,
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
    const release = await admit(runtime, { kind: "batch_item", depth: 1, signal });
    const timeout = AbortSignal.timeout(runtime.config.subagents.timeout_seconds * 1000);
    const callSignal = AbortSignal.any([signal, timeout]);
    try {
      await onStarted();
      const result = await generateText({
        model: model.model,
        system: request.system,
        messages: request.messages,
        temperature: request.temperature,
        topP: request.top_p,
        maxOutputTokens: request.max_tokens,
        stopSequences: request.stop,
        abortSignal: callSignal,
      });
      return {
        status: "completed",
        text: result.text,
        usage: { inputTokens: result.usage.inputTokens ?? 0, outputTokens: result.usage.outputTokens ?? 0 },
        model: request.model,
        stopReason: result.finishReason,
      };
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

function failed(model: string | null, error: string): ItemRunResult {
  return { status: "failed", text: "", usage: NO_USAGE, model, stopReason: "error", error };
}
