import { type FlotillaConfig, MODEL_PROVIDERS, type ModelProvider } from "@/lib/config";
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
  provider?: ModelProvider;
  /** undefined for the simulator; a native provider's own API when its entry names none. */
  baseURL?: string;
  apiKey?: string;
  /** The provider's model id. */
  model: string;
  simulator: boolean;
  pricePerMillionInput: number;
  pricePerMillionOutput: number;
  /** Cache reads (default: the input price). */
  pricePerMillionCachedInput: number;
  /** Cache writes (default: the input price). */
  pricePerMillionCacheWrite: number;
  /** The share of the price a provider batch costs (undefined: the provider has no batch lane here). */
  batchDiscount?: number;
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

export type Env = Record<string, string | undefined>;

/** Where a native provider's API is when an entry names no base_url (as its AI SDK package takes it). */
export const NATIVE_BASE_URLS: Record<Exclude<ModelProvider, "openai-compatible">, string> = {
  openai: "https://api.openai.com/v1",
  anthropic: "https://api.anthropic.com/v1",
  google: "https://generativelanguage.googleapis.com/v1beta",
};

const baseUrlFor = (provider: ModelProvider, baseURL: string | undefined) =>
  baseURL ?? (provider === "openai-compatible" ? undefined : NATIVE_BASE_URLS[provider]);

/** Providers whose batch API Flotilla can use, and the share of the live price it costs there. */
const defaultBatchDiscount = (provider: ModelProvider) =>
  provider === "openai" || provider === "anthropic" ? 0.5 : undefined;

const MODEL_VARS = ["MODEL_PROVIDER", "MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"] as const;

/** The configured endpoint, or undefined for the simulator. Throws ConfigError on a partial setup. */
export function readModelEnv(
  env: Env,
): { provider: ModelProvider; baseURL?: string; apiKey?: string; name: string } | undefined {
  const value = (key: (typeof MODEL_VARS)[number]) => {
    const v = env[key]?.trim();
    return v ? v : undefined;
  };
  const providerText = value("MODEL_PROVIDER");
  const baseURL = value("MODEL_BASE_URL");
  const apiKey = value("MODEL_API_KEY");
  const name = value("MODEL_NAME");
  if (!providerText && !baseURL && !apiKey && !name) return undefined;
  const problems: string[] = [];
  const set = MODEL_VARS.filter((k) => value(k)).join(", ");
  const provider = (providerText ?? "openai-compatible") as ModelProvider;
  if (!MODEL_PROVIDERS.includes(provider))
    problems.push(`MODEL_PROVIDER: must be one of ${MODEL_PROVIDERS.join(", ")}, got "${providerText}"`);
  // The API key is optional (local servers such as Ollama need none); the model name is not, nor
  // the URL of an OpenAI-compatible endpoint (a native provider defaults to its own API).
  if (!baseURL && provider === "openai-compatible")
    problems.push(`MODEL_BASE_URL: required when ${set} is set (the OpenAI-compatible endpoint, e.g. https://api.openai.com/v1)`);
  else if (baseURL && (!/^https?:\/\/[^/\s]+/i.test(baseURL) || !URL.canParse(baseURL)))
    problems.push(`MODEL_BASE_URL: must be an http(s) URL, got "${baseURL}"`);
  if (!name) problems.push(`MODEL_NAME: required when ${set} is set (the model id the endpoint serves, e.g. gpt-4o-mini)`);
  if (problems.length > 0) throw new ConfigError(problems);
  return { provider, baseURL, apiKey, name: name as string };
}

/** The built-in simulator's entry: always in the catalog, free. */
export const SIMULATOR_ENTRY: CatalogEntry = Object.freeze({
  name: "simulator",
  model: "simulator",
  simulator: true,
  pricePerMillionInput: 0,
  pricePerMillionOutput: 0,
  pricePerMillionCachedInput: 0,
  pricePerMillionCacheWrite: 0,
});

export function catalogEntries(config: FlotillaConfig, env: Env = process.env): CatalogEntry[] {
  const entries: CatalogEntry[] = [SIMULATOR_ENTRY];
  const fromEnv = readModelEnv(env);
  if (fromEnv)
    entries.push({
      name: "default",
      provider: fromEnv.provider,
      baseURL: baseUrlFor(fromEnv.provider, fromEnv.baseURL),
      apiKey: fromEnv.apiKey,
      model: fromEnv.name,
      simulator: false,
      pricePerMillionInput: 0,
      pricePerMillionOutput: 0,
      pricePerMillionCachedInput: 0,
      pricePerMillionCacheWrite: 0,
      batchDiscount: defaultBatchDiscount(fromEnv.provider),
    });
  for (const m of config.models) {
    const input = m.price_per_million_input ?? 0;
    entries.push({
      name: m.name,
      provider: m.provider,
      baseURL: baseUrlFor(m.provider, m.base_url),
      apiKey: m.api_key_env ? env[m.api_key_env] : undefined,
      model: m.model,
      simulator: false,
      pricePerMillionInput: input,
      pricePerMillionOutput: m.price_per_million_output ?? 0,
      pricePerMillionCachedInput: m.price_per_million_cached_input ?? input,
      pricePerMillionCacheWrite: m.price_per_million_cache_write ?? input,
      batchDiscount: m.batch_discount ?? defaultBatchDiscount(m.provider),
      requestsPerMinute: m.requests_per_minute,
      tokensPerMinute: m.tokens_per_minute,
    });
  }
  return entries;
}

/** The catalog name used when nothing names one. */
export function defaultModelName(config: FlotillaConfig, env: Env = process.env): string {
  return config.default_model ?? (readModelEnv(env) ? "default" : "simulator");
}

export function findCatalogEntry(config: FlotillaConfig, name: string, env: Env = process.env): CatalogEntry | undefined {
  return catalogEntries(config, env).find((e) => e.name === name);
}

/** The prices cost is computed from (a catalog entry's, or a batch's frozen snapshot of them). */
export type Prices = Pick<
  CatalogEntry,
  "pricePerMillionInput" | "pricePerMillionOutput" | "pricePerMillionCachedInput" | "pricePerMillionCacheWrite"
>;

/** Token counts as priced: cache reads and writes are counted inside inputTokens. */
export interface PricedUsage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens?: number;
  cacheWriteTokens?: number;
}

/**
 * US dollars for the given usage at an entry's prices: the input that was neither read from nor
 * written to a cache at the input price, cache reads and writes each at their own, output at the
 * output price.
 */
export function costUsd(entry: Prices, usage: PricedUsage): number {
  const cached = usage.cachedInputTokens ?? 0;
  const written = usage.cacheWriteTokens ?? 0;
  const plain = Math.max(0, usage.inputTokens - cached - written);
  return (
    (plain * entry.pricePerMillionInput +
      cached * entry.pricePerMillionCachedInput +
      written * entry.pricePerMillionCacheWrite +
      usage.outputTokens * entry.pricePerMillionOutput) /
    1_000_000
  );
}
