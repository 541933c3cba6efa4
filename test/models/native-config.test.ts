import { generateText, Output } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { configSchema } from "@/lib/config";
import { modelPrices, snapshotPrices } from "@/server/batches/budget";
import { ConfigError } from "@/server/config/load";
import { catalogEntries, costUsd, readModelEnv } from "@/server/models/catalog";
import { resolveModelByName } from "@/server/models/index";
import { startFakeAnthropic } from "../helpers/fake-anthropic";
import { startFakeOpenAI } from "../helpers/fake-openai";

/** Native provider entries in the catalog: their defaults, their errors naming the field, and cost kind by kind. */

const issues = (input: unknown) => {
  const r = configSchema.safeParse(input);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("models entries with a provider", () => {
  it("defaults a native provider to its own API and 0.5 batch discount (openai, anthropic); cache prices to the input price", () => {
    const config = configSchema.parse({
      models: [
        { name: "c", provider: "anthropic", model: "claude-sonnet-4-5", price_per_million_input: 3 },
        { name: "o", provider: "openai", model: "gpt-4o-mini", price_per_million_input: 0.15, price_per_million_cached_input: 0.075 },
        { name: "g", provider: "google", model: "gemini-2.5-flash", batch_discount: 0.4 },
        { name: "local", base_url: "http://127.0.0.1:11434/v1", model: "llama" },
      ],
    });
    const [, c, o, g, local] = catalogEntries(config, {});
    expect(c).toMatchObject({ provider: "anthropic", baseURL: "https://api.anthropic.com/v1", pricePerMillionCachedInput: 3, pricePerMillionCacheWrite: 3, batchDiscount: 0.5 });
    expect(o).toMatchObject({ provider: "openai", baseURL: "https://api.openai.com/v1", pricePerMillionCachedInput: 0.075, pricePerMillionCacheWrite: 0.15, batchDiscount: 0.5 });
    expect(g).toMatchObject({ provider: "google", baseURL: "https://generativelanguage.googleapis.com/v1beta", batchDiscount: 0.4 });
    expect(local).toMatchObject({ provider: "openai-compatible", baseURL: "http://127.0.0.1:11434/v1", batchDiscount: undefined });
    expect(modelPrices(config, "o")).toEqual({ input: 0.15, output: 0, cached_input: 0.075, cache_write: 0.15, batch_discount: 0.5 });
    // Each resolves to its provider's own model (no network until a call).
    expect(resolveModelByName(config, "c", {}).model.provider).toMatch(/anthropic/);
    expect(resolveModelByName(config, "o", {}).model.provider).toMatch(/openai\.chat/);
    expect(resolveModelByName(config, "g", {}).model.provider).toMatch(/google/);
  });

  it("names the field: base_url for openai-compatible, the provider, the discount", () => {
    expect(issues({ models: [{ name: "x", model: "m" }] })).toEqual([
      'models.0.base_url: required for provider "openai-compatible" (the endpoint, e.g. http://localhost:11434/v1)',
    ]);
    expect(issues({ models: [{ name: "x", provider: "mistral", model: "m" }] })[0]).toMatch(/^models\.0\.provider: /);
    expect(issues({ models: [{ name: "x", provider: "openai", model: "m", batch_discount: 1.5 }] })[0]).toMatch(/^models\.0\.batch_discount: /);
    expect(issues({ models: [{ name: "x", provider: "openai", model: "m", price_per_million_cache_write: -1 }] })[0]).toMatch(
      /^models\.0\.price_per_million_cache_write: /,
    );
  });

  it("MODEL_PROVIDER selects the default entry's provider; MODEL_BASE_URL is then optional", () => {
    expect(readModelEnv({ MODEL_PROVIDER: "anthropic", MODEL_NAME: "claude-sonnet-4-5", MODEL_API_KEY: "k" })).toEqual({
      provider: "anthropic",
      baseURL: undefined,
      apiKey: "k",
      name: "claude-sonnet-4-5",
    });
    const [, entry] = catalogEntries(configSchema.parse({}), { MODEL_PROVIDER: "google", MODEL_NAME: "gemini-2.5-flash" });
    expect(entry).toMatchObject({ name: "default", provider: "google", baseURL: "https://generativelanguage.googleapis.com/v1beta" });
    expect(() => readModelEnv({ MODEL_NAME: "m" })).toThrow(/MODEL_BASE_URL: required/);
    expect(() => readModelEnv({ MODEL_PROVIDER: "azure", MODEL_NAME: "m" })).toThrow(ConfigError);
    expect(() => readModelEnv({ MODEL_PROVIDER: "azure", MODEL_NAME: "m" })).toThrow(/MODEL_PROVIDER: must be one of openai-compatible, openai, anthropic, google/);
    expect(() => readModelEnv({ MODEL_PROVIDER: "openai" })).toThrow(/MODEL_NAME: required/);
  });
});

describe("cost kind by kind", () => {
  const prices = { pricePerMillionInput: 3, pricePerMillionOutput: 15, pricePerMillionCachedInput: 0.3, pricePerMillionCacheWrite: 3.75 };

  it("prices input minus cache at the input price, reads, writes and output each at their own", () => {
    // 10,000 input of which 6,000 read and 3,000 written: 1,000 plain.
    const usage = { inputTokens: 10_000, outputTokens: 200, cachedInputTokens: 6_000, cacheWriteTokens: 3_000 };
    expect(costUsd(prices, usage)).toBeCloseTo((1_000 * 3 + 6_000 * 0.3 + 3_000 * 3.75 + 200 * 15) / 1e6, 15);
    expect(costUsd(prices, { inputTokens: 10_000, outputTokens: 200 })).toBeCloseTo((10_000 * 3 + 200 * 15) / 1e6, 15);
  });

  it("a frozen snapshot without cache prices (older batches) prices cache tokens at the input price", () => {
    const usage = { inputTokens: 1_000, outputTokens: 0, cachedInputTokens: 1_000 };
    expect(costUsd(snapshotPrices({ input: 2, output: 10 }), usage)).toBeCloseTo(0.002, 15);
    expect(costUsd(snapshotPrices({ input: 2, output: 10, cached_input: 0.2 }), usage)).toBeCloseTo(0.0002, 15);
  });
});

describe("typed results in each provider's structured-output mode", () => {
  const schema = z.object({ n: z.number(), note: z.string().optional() });

  it("openai: a json_schema response format, not strict (ordinary schemas with optional properties pass)", async () => {
    const fake = await startFakeOpenAI({ handler: () => ({ type: "text", text: '{"n":1}' }) });
    try {
      const config = configSchema.parse({ models: [{ name: "o", provider: "openai", base_url: fake.url, model: "gpt-4o-mini", api_key_env: "K" }] });
      const r = await generateText({ model: resolveModelByName(config, "o", { K: "k" }).model, prompt: "n?", output: Output.object({ schema }) });
      expect(r.output).toEqual({ n: 1 });
      expect(fake.requests.at(-1)?.body?.response_format).toMatchObject({ type: "json_schema", json_schema: { strict: false } });
    } finally {
      await fake.close();
    }
  });

  it("anthropic: the output format on models that have one", async () => {
    const fake = await startFakeAnthropic({ handler: () => ({ type: "text", text: '{"n":2}' }) });
    try {
      const config = configSchema.parse({ models: [{ name: "c", provider: "anthropic", base_url: fake.url, model: "claude-sonnet-4-5", api_key_env: "K" }] });
      const r = await generateText({ model: resolveModelByName(config, "c", { K: "k" }).model, prompt: "n?", output: Output.object({ schema }) });
      expect(r.output).toEqual({ n: 2 });
      expect(fake.requests.at(-1)?.body?.output_config).toMatchObject({ format: { type: "json_schema" } });
    } finally {
      await fake.close();
    }
  });
});
