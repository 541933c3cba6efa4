import { generateText, type LanguageModelMiddleware, streamText } from "ai";
import { describe, expect, it } from "vitest";
import { loadConfig } from "@/server/config/load";
import { resolveModel, withModelMiddleware } from "@/server/models";
import { createSimulatorModel } from "@/server/models/simulator";

const config = loadConfig({ env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }, cwd: "/nonexistent" });

describe("resolveModel", () => {
  it("serves the simulator when no endpoint is configured, cached per process", () => {
    const a = resolveModel(config, {});
    expect(a).toMatchObject({ name: "simulator", simulator: true });
    expect(a.model.specificationVersion).toBe("v3");
    expect(resolveModel(config, { MODEL_NAME: "  " })).toBe(a);
    // Another configuration object gets its own instance (its own shared middleware).
    const other = loadConfig({ env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }, cwd: "/nonexistent" });
    expect(resolveModel(other, {})).not.toBe(a);
    expect(resolveModel(other, {})).toBe(resolveModel(other, {}));
  });

  it("honours simulator.latency_ms from configuration", async () => {
    const slow = resolveModel(loadConfig({ env: { FLOTILLA__SIMULATOR__LATENCY_MS: "250" }, cwd: "/nonexistent" }), {});
    const t = Date.now();
    const { stream } = await slow.model.doStream({ prompt: [{ role: "user", content: [{ type: "text", text: "hi" }] }] });
    const reader = stream.getReader();
    while (!(await reader.read()).done) {}
    expect(Date.now() - t).toBeGreaterThanOrEqual(245);
  });

  it("names the missing variable when the endpoint is only partly configured", () => {
    expect(() => resolveModel(config, { MODEL_API_KEY: "sk-1" })).toThrow(/MODEL_BASE_URL: required[\s\S]*MODEL_NAME: required/);
    expect(() => resolveModel(config, { MODEL_BASE_URL: "http://127.0.0.1:9/v1" })).toThrow(/MODEL_NAME: required/);
    expect(() => resolveModel(config, { MODEL_NAME: "m" })).toThrow(/MODEL_BASE_URL: required/);
    expect(() => resolveModel(config, { MODEL_BASE_URL: "ftp://x", MODEL_NAME: "m" })).toThrow(/MODEL_BASE_URL: must be an http/);
  });

  it("uses the OpenAI-compatible endpoint when base URL and name are set (key optional)", () => {
    const r = resolveModel(config, { MODEL_BASE_URL: "http://127.0.0.1:9/v1", MODEL_NAME: "local-llama" });
    expect(r).toMatchObject({ name: "local-llama", simulator: false });
    expect(r.model.modelId).toBe("local-llama");
  });
});

describe("withModelMiddleware", () => {
  it("runs middleware around every call and leaves the model untouched without any", async () => {
    const base = createSimulatorModel({ latencyMs: 0 });
    expect(withModelMiddleware(base, [])).toBe(base);
    const seen: string[] = [];
    const counting: LanguageModelMiddleware = {
      specificationVersion: "v3",
      wrapStream: async ({ doStream, params }) => {
        seen.push(`stream:${params.prompt.length}`);
        return doStream();
      },
      wrapGenerate: async ({ doGenerate }) => {
        seen.push("generate");
        return doGenerate();
      },
    };
    const wrapped = withModelMiddleware(base, [counting]);
    expect(wrapped.modelId).toBe("simulator");
    const streamed = streamText({ model: wrapped, prompt: "hello [[chars:5]]" });
    expect(await streamed.text).toHaveLength(5);
    await generateText({ model: wrapped, prompt: "hi" });
    expect(seen).toEqual(["stream:1", "generate"]);
    // Errors still surface through the wrapper unchanged.
    await expect(generateText({ model: wrapped, prompt: "x [[429]]", maxRetries: 0 })).rejects.toMatchObject({ statusCode: 429 });
  });
});
