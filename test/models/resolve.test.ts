import { describe, expect, it } from "vitest";
import { loadConfig } from "@/server/config/load";
import { resolveModel } from "@/server/models";

const config = loadConfig({ env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0" }, cwd: "/nonexistent" });

describe("resolveModel", () => {
  it("serves the simulator when no endpoint is configured, cached per process", () => {
    const a = resolveModel(config, {});
    expect(a).toMatchObject({ name: "simulator", simulator: true });
    expect(a.model.specificationVersion).toBe("v3");
    expect(resolveModel(config, { MODEL_NAME: "  " })).toBe(a);
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
