import { describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";
import { catalogEntries } from "@/server/models/catalog";
import { resolveModelByName } from "@/server/models/index";
import { catalogEndpointKey, rateLimitSettingsFromConfig } from "@/server/runtime/rate-limit";

/** Rate limits and prices per catalog entry, keyed by base URL + model id. */

const config = configSchema.parse({
  rate_limits: { requests_per_minute: 60, tokens_per_minute: 9_000 },
  models: [
    { name: "own", base_url: "http://127.0.0.1:9/v1/", model: "m-1", requests_per_minute: 600, tokens_per_minute: 0 },
    { name: "inherits", base_url: "http://127.0.0.1:9/v1", model: "m-1" },
    { name: "other-host", base_url: "http://127.0.0.2:9/v1", model: "m-1", price_per_million_output: 2 },
  ],
});

describe("catalog rate limits", () => {
  it("uses an entry's own budget, falling back to rate_limits.* per dimension when it sets none", () => {
    const [, own, inherits] = catalogEntries(config, {});
    expect(rateLimitSettingsFromConfig(config, own)).toMatchObject({ requestsPerMinute: 600, tokensPerMinute: 0 });
    expect(rateLimitSettingsFromConfig(config, inherits)).toMatchObject({ requestsPerMinute: 60, tokensPerMinute: 9_000 });
  });

  it("keys endpoints by base URL and model id: same server and model share, another host does not", () => {
    const own = resolveModelByName(config, "own", {});
    const inherits = resolveModelByName(config, "inherits", {});
    const other = resolveModelByName(config, "other-host", {});
    expect(own.endpoint).toBe("http://127.0.0.1:9/v1|m-1");
    expect(inherits.endpoint).toBe(own.endpoint);
    expect(other.endpoint).not.toBe(own.endpoint);
    expect(catalogEndpointKey({ model: "simulator" })).toBe("simulator|simulator");
    expect(own).toMatchObject({ catalogName: "own", name: "m-1", simulator: false });
    expect(other.entry.pricePerMillionOutput).toBe(2);
  });

  it("refuses an unknown name with model_unavailable", () => {
    expect(() => resolveModelByName(config, "missing", {})).toThrow(/model "missing" is not in this process's catalog/);
  });
});

describe("cost per model", () => {
  it("prices a run's usage at its catalog entry (0 for the simulator or a model this process lacks)", async () => {
    const { runCostUsd } = await import("@/server/agent/runs");
    expect(runCostUsd({ model: "other-host", inputTokens: 5_000, outputTokens: 500_000 }, config)).toBeCloseTo(1);
    expect(runCostUsd({ model: "simulator", inputTokens: 5_000, outputTokens: 500_000 }, config)).toBe(0);
    expect(runCostUsd({ model: "gone", inputTokens: 5_000, outputTokens: 500_000 }, config)).toBe(0);
  });
});

describe("batch price snapshot", () => {
  it("takes the prices of the catalog entry a spec names (0 for the simulator or a model this process lacks)", async () => {
    const { modelPrices } = await import("@/server/batches/budget");
    expect(modelPrices(config, "other-host")).toEqual({ input: 0, output: 2, cached_input: 0, cache_write: 0 });
    expect(modelPrices(config, "simulator")).toEqual({ input: 0, output: 0, cached_input: 0, cache_write: 0 });
    expect(modelPrices(config, "gone")).toEqual({ input: 0, output: 0, cached_input: 0, cache_write: 0 });
  });
});
