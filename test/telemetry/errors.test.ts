import { generateText, stepCountIs, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { resolveModel } from "@/server/models";
import { initTelemetry, shutdownTelemetry } from "@/server/telemetry";
import { wrapTool } from "@/server/tools";
import { testConfig } from "../batches/support";
import { type Receiver, startReceiver } from "./receiver";

/**
 * Failures on spans: a tool call that throws is an `execute_tool` span with `error.type` (the
 * error's code), and a model call the provider refuses is a `chat` span with an error status.
 * The SDK runs in this process through server/telemetry, exporting http/json to a local receiver.
 */

const ERROR = 2; // OTLP status code
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = receiver.endpoint;
  process.env.OTEL_EXPORTER_OTLP_PROTOCOL = "http/json";
  await initTelemetry("flotilla-worker");
});
afterAll(async () => {
  await shutdownTelemetry();
  await receiver?.close();
  delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  delete process.env.OTEL_EXPORTER_OTLP_PROTOCOL;
});

describe("failed calls on their spans", () => {
  it("a throwing tool: error.type on its execute_tool span; a failing model call: an error chat span", async () => {
    const config = testConfig({ simulator: { latency_ms: 0 } });
    const model = resolveModel(config, {});
    const explode = wrapTool(
      "explode",
      tool({
        description: "fails",
        inputSchema: z.object({}),
        execute: async (): Promise<string> => {
          throw Object.assign(new Error("boom"), { code: "tool_failed" });
        },
      }),
      {},
    );
    await generateText({ model: model.model, prompt: "go [[tool:explode {}]]", tools: { explode }, stopWhen: stepCountIs(2) });
    await expect(generateText({ model: model.model, prompt: "[[fail]]", maxRetries: 0 })).rejects.toThrow();
    await shutdownTelemetry();

    const spans = receiver.spans();
    const call = spans.find((s) => s.name === "execute_tool explode");
    expect(call, JSON.stringify(spans.map((s) => s.name))).toBeDefined();
    expect(call!.attributes).toMatchObject({ "gen_ai.tool.name": "explode", "error.type": "tool_failed" });
    expect(String(call!.attributes["gen_ai.tool.call.id"])).not.toBe("");
    const calls = receiver.requests.flatMap((r) => JSON.parse(r.body.toString("utf8")).resourceSpans[0].scopeSpans.flatMap((ss: { spans: unknown[] }) => ss.spans));
    const status = (name: string) => calls.filter((s: { name: string }) => s.name === name).map((s: { status?: { code?: number } }) => s.status?.code ?? 0);
    expect(status("execute_tool explode")).toEqual([ERROR]);
    const chats = spans.filter((s) => s.name === "chat simulator");
    expect(chats).toHaveLength(3); // the call, the answer after its error, the refused one
    expect(status("chat simulator").filter((c: number) => c === ERROR)).toHaveLength(1);
    expect(chats.filter((c) => c.attributes["error.type"] !== undefined)).toHaveLength(1);
  });
});
