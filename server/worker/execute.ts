import { runSubagent } from "@/server/agent/executor";
import type { ItemExecutor, ItemRunContext, ItemRunResult } from "@/server/batches/item-executor";
import { compatItemExecutor } from "@/server/compat/execute";
import { type ExecutionSpec, snapshotDefinition } from "@/server/batches/spec";
import type { Db } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { resolveModelByName } from "@/server/models/index";
import type { ResolvedModel } from "@/server/models/types";
import type { SubagentRuntime } from "@/server/runtime/admission";
import { endpointBackoffMs } from "@/server/runtime/rate-limit";

export type { ItemExecutor, ItemRunContext, ItemRunResult };

/**
 * The model a spec names, from this worker's catalog. A worker without it fails the item with
 * `model_unavailable` (never another model). `fallback` is an injected model (tests, benchmarks).
 */
function specModel(spec: ExecutionSpec, runtime: SubagentRuntime, fallback?: ResolvedModel): ResolvedModel {
  if (fallback?.catalogName === spec.model.name) return fallback;
  return resolveModelByName(runtime.config, spec.model.name);
}

/**
 * The production executor: the spec's snapshot definition and model, run by runSubagent.
 * Items of the compatible batch APIs (spec kind compat_*) run their stored request instead.
 */
export function subagentItemExecutor(args: { db: Db; model?: ResolvedModel; runtime: SubagentRuntime }): ItemExecutor {
  const compat = compatItemExecutor(args);
  return async (ctx) => {
    if (ctx.spec.kind !== "subagent") return compat(ctx);
    const { item, spec, signal, onStarted } = ctx;
    let model: ResolvedModel;
    try {
      model = specModel(spec, args.runtime, args.model);
    } catch (err) {
      if (!(err instanceof AppError) || err.code !== "model_unavailable") throw err;
      return {
        status: "failed",
        text: "",
        usage: { inputTokens: 0, outputTokens: 0 },
        model: spec.model.name,
        stopReason: "model_unavailable",
        error: `model_unavailable: ${err.message}; this worker cannot run the batch's model`,
        errorClass: "model_unavailable",
      };
    }
    const result = await runSubagent(args.db, {
      userId: spec.caller.user_id,
      threadId: spec.caller.thread_id,
      kind: "batch_item",
      definition: snapshotDefinition(spec),
      prompt: item.prompt,
      model,
      signal,
      runtime: args.runtime,
      onStarted,
      returnRunRow: true,
    });
    return {
      status: result.status,
      text: result.text,
      usage: result.usage,
      model: result.model,
      stopReason: result.stopReason,
      error: result.error,
      errorClass: result.errorClass,
      runId: result.runId,
      toolCalls: result.toolCalls,
      runRow: result.runRow,
      retryAfterMs: result.errorClass === "rate_limit" ? endpointBackoffMs(model.endpoint) : undefined,
    };
  };
}
