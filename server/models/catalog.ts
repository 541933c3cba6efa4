import type { FlotillaConfig } from "@/lib/config";
import { ConfigError } from "@/server/config/load";

/**
 * The model catalog as data: every name a definition, a batch or a compatible-API request may
 * use. "simulator" is always present; MODEL_BASE_URL / MODEL_NAME add "default". Resolving an
 * entry to a LanguageModel lives in ./index.ts; this file stays pure so prices and names can be
 * read anywhere (projections, budgets, validation).
 */
export interface CatalogEntry {
  name: string;
  /** undefined for the simulator. */
  baseURL?: string;
  apiKey?: string;
  /** The provider's model id. */
  model: string;
  simulator: boolean;
  pricePerMillionInput: number;
  pricePerMillionOutput: number;
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export type Env = Record<string, string | undefined>;

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


/** The built-in simulator's entry: always in the catalog, free. */
export const SIMULATOR_ENTRY: CatalogEntry = Object.freeze({
  name: "simulator",
  model: "simulator",
  simulator: true,
  pricePerMillionInput: 0,
  pricePerMillionOutput: 0,
});

export function catalogEntries(config: FlotillaConfig, env: Env = process.env): CatalogEntry[] {
  const entries: CatalogEntry[] = [SIMULATOR_ENTRY];
  const fromEnv = readModelEnv(env);
  if (fromEnv)
    entries.push({
      name: "default",
      baseURL: fromEnv.baseURL,
      apiKey: fromEnv.apiKey,
      model: fromEnv.name,
      simulator: false,
      pricePerMillionInput: 0,
      pricePerMillionOutput: 0,
    });
  for (const m of config.models)
    entries.push({
      name: m.name,
      baseURL: m.base_url,
      apiKey: m.api_key_env ? env[m.api_key_env] : undefined,
      model: m.model,
      simulator: false,
      pricePerMillionInput: m.price_per_million_input ?? 0,
      pricePerMillionOutput: m.price_per_million_output ?? 0,
      requestsPerMinute: m.requests_per_minute,
      tokensPerMinute: m.tokens_per_minute,
    });
  return entries;
}

/** The catalog name used when nothing names one. */
export function defaultModelName(config: FlotillaConfig, env: Env = process.env): string {
  return config.default_model ?? (readModelEnv(env) ? "default" : "simulator");
}

export function findCatalogEntry(config: FlotillaConfig, name: string, env: Env = process.env): CatalogEntry | undefined {
  return catalogEntries(config, env).find((e) => e.name === name);
}

/** US dollars for the given usage at an entry's prices. */
export function costUsd(entry: Pick<CatalogEntry, "pricePerMillionInput" | "pricePerMillionOutput">, usage: { inputTokens: number; outputTokens: number }): number {
  return (usage.inputTokens * entry.pricePerMillionInput + usage.outputTokens * entry.pricePerMillionOutput) / 1_000_000;
}
