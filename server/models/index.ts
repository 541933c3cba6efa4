import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import { type LanguageModelMiddleware, wrapLanguageModel } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import { ConfigError, getConfig } from "@/server/config/load";
import { rateLimitMiddleware } from "@/server/runtime/rate-limit";
import { createSimulatorModel, SIMULATOR_MODEL_ID } from "./simulator";
import type { ResolvedModel } from "./types";

export type { ResolvedModel } from "./types";

/**
 * Middleware every resolved model runs through, outermost first. Shared concerns (such as the
 * process-wide rate limiter) are added here, in this one place.
 */
export function sharedModelMiddleware(config: FlotillaConfig): LanguageModelMiddleware[] {
  return [rateLimitMiddleware({ config })];
}

/** Wraps a model with middleware; returns the model itself when there is none. */
export function withModelMiddleware(model: LanguageModelV3, middleware: LanguageModelMiddleware[]): LanguageModelV3 {
  return middleware.length === 0 ? model : wrapLanguageModel({ model, middleware });
}

type Env = Record<string, string | undefined>;

const MODEL_VARS = ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"] as const;

/** The configured endpoint, or undefined for the simulator. Throws ConfigError on a partial setup. */
export function readModelEnv(env: Env): { baseURL: string; apiKey?: string; name: string } | undefined {
  const value = (key: (typeof MODEL_VARS)[number]) => {
    const v = env[key]?.trim();
    return v ? v : undefined;
  };
  const baseURL = value("MODEL_BASE_URL");
  const apiKey = value("MODEL_API_KEY");
  const name = value("MODEL_NAME");
  if (!baseURL && !apiKey && !name) return undefined;
  const problems: string[] = [];
  const set = MODEL_VARS.filter((k) => value(k)).join(", ");
  // The API key is optional (local servers such as Ollama need none); the URL and model name are not.
  if (!baseURL) problems.push(`MODEL_BASE_URL: required when ${set} is set (the OpenAI-compatible endpoint, e.g. https://api.openai.com/v1)`);
  else if (!/^https?:\/\/[^/\s]+/i.test(baseURL) || !URL.canParse(baseURL))
    problems.push(`MODEL_BASE_URL: must be an http(s) URL, got "${baseURL}"`);
  if (!name) problems.push(`MODEL_NAME: required when ${set} is set (the model id the endpoint serves, e.g. gpt-4o-mini)`);
  if (problems.length > 0) throw new ConfigError(problems);
  return { baseURL: baseURL as string, apiKey, name: name as string };
}

// Per config object (the process singleton in production), so middleware built from one
// configuration never serves another.
let cache = new WeakMap<FlotillaConfig, Map<string, ResolvedModel>>();

/**
 * The model this process uses: the OpenAI-compatible endpoint when MODEL_BASE_URL and MODEL_NAME
 * (and optionally MODEL_API_KEY) are set, otherwise the built-in simulator. Resolved once per
 * distinct configuration and cached for the life of the process.
 */
export function resolveModel(config: FlotillaConfig = getConfig(), env: Env = process.env): ResolvedModel {
  const endpoint = readModelEnv(env);
  const key = endpoint
    ? `openai:${endpoint.baseURL}|${endpoint.name}|${endpoint.apiKey ?? ""}`
    : `simulator:${config.simulator.latency_ms}`;
  let byKey = cache.get(config);
  if (!byKey) {
    byKey = new Map();
    cache.set(config, byKey);
  }
  const hit = byKey.get(key);
  if (hit) return hit;
  let resolved: ResolvedModel;
  if (endpoint) {
    const provider = createOpenAICompatible({
      name: "openai-compatible",
      baseURL: endpoint.baseURL.replace(/\/+$/, ""),
      apiKey: endpoint.apiKey,
      // Ask for usage in streamed responses; batches and runs account tokens from it.
      includeUsage: true,
    });
    resolved = {
      model: withModelMiddleware(provider.chatModel(endpoint.name), sharedModelMiddleware(config)),
      name: endpoint.name,
      simulator: false,
    };
  } else {
    resolved = {
      model: withModelMiddleware(createSimulatorModel({ latencyMs: config.simulator.latency_ms }), sharedModelMiddleware(config)),
      name: SIMULATOR_MODEL_ID,
      simulator: true,
    };
  }
  byKey.set(key, resolved);
  return resolved;
}

/** Drops cached models (tests only). */
export function resetModelCache(): void {
  cache = new WeakMap();
}
