import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import { type LanguageModelMiddleware, wrapLanguageModel } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import { getConfig } from "@/server/config/load";
import { AppError } from "@/server/errors";
import { chatSpanMiddleware } from "@/server/telemetry/model";
import { catalogEndpointKey, type EndpointBudget, rateLimitMiddleware } from "@/server/runtime/rate-limit";
import { type CatalogEntry, defaultModelName, type Env, findCatalogEntry } from "./catalog";
import { createSimulatorModel, SIMULATOR_MODEL_ID } from "./simulator";
import type { ResolvedModel } from "./types";

export { readModelEnv } from "./catalog";
export type { ResolvedModel } from "./types";

/**
 * Middleware every resolved model runs through, outermost first. Shared concerns (such as the
 * process-wide rate limiter) are added here, in this one place.
 */
export function sharedModelMiddleware(
  config: FlotillaConfig,
  model: string,
  endpoint?: { key: string; budget: EndpointBudget },
): LanguageModelMiddleware[] {
  // The chat span first, so a wait for the rate limiter shows inside the call it delays.
  return [chatSpanMiddleware(model), rateLimitMiddleware({ config, endpoint: endpoint?.key, budget: endpoint?.budget })];
}

/** Wraps a model with middleware; returns the model itself when there is none. */
export function withModelMiddleware(model: LanguageModelV3, middleware: LanguageModelMiddleware[]): LanguageModelV3 {
  return middleware.length === 0 ? model : wrapLanguageModel({ model, middleware });
}

/**
 * JSON-schema answers (typed results) go out as `response_format: json_schema`, not strict unless
 * a caller asks (`providerOptions.openaiCompatible.strictJsonSchema`): OpenAI's strict mode
 * refuses ordinary schemas (optional properties, no additionalProperties: false).
 */
const looseJsonSchema = (options: "openaiCompatible" | "openai"): LanguageModelMiddleware => ({
  specificationVersion: "v3",
  transformParams: async ({ params }) => {
    const own = params.providerOptions?.[options];
    if (params.responseFormat?.type !== "json" || !params.responseFormat.schema || own?.strictJsonSchema !== undefined) return params;
    return { ...params, providerOptions: { ...params.providerOptions, [options]: { ...own, strictJsonSchema: false } } };
  },
});

/**
 * The provider's own model for a non-simulator entry, with what its provider needs beyond the
 * shared middleware. Typed results go out in each provider's structured-output mode: OpenAI's
 * `json_schema` response format (not strict, as above), Anthropic's output format (or its forced
 * JSON tool on models without one), Gemini's response schema.
 */
export function providerModel(
  entry: CatalogEntry,
  /** A transport of the caller's (the provider batch lane captures and replays requests with it). */
  fetch?: typeof globalThis.fetch,
): { model: LanguageModelV3; middleware: LanguageModelMiddleware[] } {
  const baseURL = entry.baseURL?.replace(/\/+$/, "");
  const settings = { baseURL, apiKey: entry.apiKey, ...(fetch ? { fetch } : {}) };
  switch (entry.provider) {
    case "openai":
      // The chat completions API: the one the provider batch lane sends to as well.
      return { model: createOpenAI(settings).chat(entry.model), middleware: [looseJsonSchema("openai")] };
    case "anthropic":
      return { model: createAnthropic(settings)(entry.model), middleware: [] };
    case "google":
      return { model: createGoogleGenerativeAI(settings)(entry.model), middleware: [] };
    default: {
      const provider = createOpenAICompatible({
        name: "openai-compatible",
        baseURL: baseURL as string,
        apiKey: entry.apiKey,
        // Ask for usage in streamed responses; batches and runs account tokens from it.
        includeUsage: true,
        supportsStructuredOutputs: true,
      });
      return { model: provider.chatModel(entry.model), middleware: [looseJsonSchema("openaiCompatible")] };
    }
  }
}

// Per config object (the process singleton in production), so middleware built from one
// configuration never serves another.
const cache = new WeakMap<FlotillaConfig, Map<string, ResolvedModel>>();

/**
 * Resolves a catalog name (see ./catalog.ts) to a model with the shared middleware. Resolved
 * once per distinct configuration and entry, and cached for the life of the process. Throws
 * AppError("model_unavailable") for a name this process's catalog does not have.
 */
export function resolveModelByName(config: FlotillaConfig, name: string, env: Env = process.env): ResolvedModel {
  const entry = findCatalogEntry(config, name, env);
  if (!entry) throw new AppError("model_unavailable", `model "${name}" is not in this process's catalog`);
  const key = entry.simulator
    ? `simulator:${config.simulator.latency_ms}`
    : `${entry.provider}:${entry.name}|${entry.baseURL}|${entry.model}|${entry.apiKey ?? ""}`;
  let byKey = cache.get(config);
  if (!byKey) {
    byKey = new Map();
    cache.set(config, byKey);
  }
  const hit = byKey.get(key);
  if (hit) return hit;
  let resolved: ResolvedModel;
  const endpoint = catalogEndpointKey(entry);
  // The entry's own budget, each dimension falling back to rate_limits.* when it sets none.
  const limits = {
    key: endpoint,
    // A real provider's answers state its limits; the simulator's do not.
    budget: { requestsPerMinute: entry.requestsPerMinute, tokensPerMinute: entry.tokensPerMinute, learn: !entry.simulator && !!entry.baseURL },
  };
  if (!entry.simulator && entry.baseURL) {
    const own = providerModel(entry);
    resolved = {
      model: withModelMiddleware(own.model, [...sharedModelMiddleware(config, entry.model, limits), ...own.middleware]),
      name: entry.model,
      simulator: false,
      catalogName: entry.name,
      entry,
      endpoint,
    };
  } else {
    resolved = {
      model: withModelMiddleware(
        createSimulatorModel({ latencyMs: config.simulator.latency_ms }),
        sharedModelMiddleware(config, SIMULATOR_MODEL_ID, limits),
      ),
      name: SIMULATOR_MODEL_ID,
      simulator: true,
      catalogName: entry.name,
      entry,
      endpoint,
    };
  }
  byKey.set(key, resolved);
  return resolved;
}

/** The model this process uses when nothing names one: `default_model`, else "default" (MODEL_*), else the simulator. */
export function resolveModel(config: FlotillaConfig = getConfig(), env: Env = process.env): ResolvedModel {
  return resolveModelByName(config, defaultModelName(config, env), env);
}
