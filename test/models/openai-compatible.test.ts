import { APICallError } from "@ai-sdk/provider";
import { generateText, RetryError, stepCountIs, streamText, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { loadConfig } from "@/server/config/load";
import { resolveModel } from "@/server/models";
import { classifyModelError, retryAfterMs } from "@/server/runtime/model-errors";
import { type FakeOpenAI, rateLimitReply, startFakeOpenAI } from "../helpers/fake-openai";

const config = loadConfig({ env: {}, cwd: "/nonexistent" });

describe("OpenAI-compatible endpoint through resolveModel", () => {
  let fake: FakeOpenAI;
  let env: Record<string, string>;

  beforeAll(async () => {
    fake = await startFakeOpenAI();
    env = { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "sk-test-123", MODEL_NAME: "fake-gpt" };
  });
  afterAll(() => fake.close());

  it("streams text in chunks with usage, sending the bearer key and model name", async () => {
    const resolved = resolveModel(config, env);
    expect(resolved).toMatchObject({ name: "fake-gpt", simulator: false });
    const before = fake.requests.length;
    const result = streamText({ model: resolved.model, prompt: "the quick brown fox jumps over the lazy dog" });
    const deltas: string[] = [];
    for await (const delta of result.textStream) deltas.push(delta);
    expect(deltas.length).toBeGreaterThan(5);
    expect(deltas.join("")).toBe("Echo: the quick brown fox jumps over the lazy dog");
    const usage = await result.usage;
    expect(usage.inputTokens).toBeGreaterThan(0);
    expect(usage.outputTokens).toBe(Math.ceil("Echo: the quick brown fox jumps over the lazy dog".length / 4));

    const req = fake.requests[before];
    expect(req.method).toBe("POST");
    expect(req.path).toBe("/v1/chat/completions");
    expect(req.headers.authorization).toBe("Bearer sk-test-123");
    expect(req.body).toMatchObject({ model: "fake-gpt", stream: true, stream_options: { include_usage: true } });
    expect(req.body?.messages).toEqual([{ role: "user", content: "the quick brown fox jumps over the lazy dog" }]);
  });

  it("parses a streamed tool call, runs the tool and sends its result back", async () => {
    const { model } = resolveModel(config, env);
    const before = fake.requests.length;
    const seen: Array<{ city: string; days: number }> = [];
    const result = streamText({
      model,
      prompt: 'Weather please [[call:forecast {"city":"Bergen","days":3}]]',
      tools: {
        forecast: tool({
          description: "Forecast for a city",
          inputSchema: z.object({ city: z.string(), days: z.number().int() }),
          execute: async (input) => {
            seen.push(input);
            return { summary: `rain in ${input.city}` };
          },
        }),
      },
      stopWhen: stepCountIs(3),
    });
    const text = await result.text;
    const steps = await result.steps;
    expect(seen).toEqual([{ city: "Bergen", days: 3 }]);
    expect(steps[0].toolCalls).toEqual([
      expect.objectContaining({ toolName: "forecast", input: { city: "Bergen", days: 3 } }),
    ]);
    expect(steps[0].finishReason).toBe("tool-calls");
    expect(text).toBe('Tool results: {"summary":"rain in Bergen"}');
    const [first, second] = fake.requests.slice(before);
    expect(first.body?.tools?.[0]?.function?.name).toBe("forecast");
    expect(second.body?.messages?.at(-1)).toMatchObject({ role: "tool", tool_call_id: steps[0].toolCalls[0].toolCallId });
  });

  it("classifies a 429 as rate_limit with the provider's retry-after", async () => {
    const { model } = resolveModel(config, env);
    const errors: unknown[] = [];
    const result = streamText({
      model,
      prompt: "slow down [[429]]",
      maxRetries: 0,
      onError: ({ error }) => {
        errors.push(error);
      },
    });
    await expect(result.text).rejects.toBeDefined();
    expect(errors).toHaveLength(1);
    const err = errors[0];
    expect(APICallError.isInstance(err) && err.statusCode).toBe(429);
    expect(classifyModelError(err)).toBe("rate_limit");
    expect(retryAfterMs(err)).toBe(2000);
    const generated = await generateText({ model, prompt: "slow down [[429]]", maxRetries: 0 }).catch((e: unknown) => e);
    expect(classifyModelError(generated)).toBe("rate_limit");
    expect(retryAfterMs(generated)).toBe(2000);
  });

  it("retries a 429 after retry-after-ms and succeeds; exhausted retries stay rate_limit", async () => {
    let calls = 0;
    const flaky = await startFakeOpenAI({
      handler: () => (++calls === 1 ? rateLimitReply({ "retry-after-ms": "150" }) : { type: "text", text: "finally" }),
    });
    try {
      const { model } = resolveModel(config, { MODEL_BASE_URL: flaky.url, MODEL_NAME: "flaky-model" });
      const t = Date.now();
      const ok = await generateText({ model, prompt: "hello", maxRetries: 1 });
      expect(ok.text).toBe("finally");
      expect(Date.now() - t).toBeGreaterThanOrEqual(140);
      expect(flaky.requests).toHaveLength(2);
      // No MODEL_API_KEY: no Authorization header at all.
      expect(flaky.requests[0].headers.authorization).toBeUndefined();
    } finally {
      await flaky.close();
    }

    const always = await startFakeOpenAI({ handler: () => rateLimitReply({ "retry-after-ms": "20" }) });
    try {
      const { model } = resolveModel(config, { MODEL_BASE_URL: always.url, MODEL_NAME: "busy-model" });
      const err = await generateText({ model, prompt: "hello", maxRetries: 2 }).catch((e: unknown) => e);
      expect(RetryError.isInstance(err)).toBe(true);
      expect(always.requests).toHaveLength(3);
      expect(classifyModelError(err)).toBe("rate_limit");
      expect(retryAfterMs(err)).toBe(20);
    } finally {
      await always.close();
    }
  });

  it("classifies other HTTP failures as provider errors and aborts as aborted", async () => {
    const broken = await startFakeOpenAI({
      handler: (req) =>
        req.body?.messages?.some((m) => String(m.content).includes("slow"))
          ? { type: "text", text: "word ".repeat(200), chunkDelayMs: 20 }
          : { type: "error", status: 500, body: { error: { message: "boom" } } },
    });
    try {
      const { model } = resolveModel(config, { MODEL_BASE_URL: broken.url, MODEL_NAME: "broken" });
      const err = await generateText({ model, prompt: "hi", maxRetries: 0 }).catch((e: unknown) => e);
      expect(classifyModelError(err)).toBe("provider");
      expect(retryAfterMs(err)).toBeUndefined();

      const controller = new AbortController();
      const errors: unknown[] = [];
      let aborted = false;
      const result = streamText({
        model,
        prompt: "slow please",
        abortSignal: controller.signal,
        onError: ({ error }) => {
          errors.push(error);
        },
        onAbort: () => {
          aborted = true;
        },
      });
      let text = "";
      const t = Date.now();
      for await (const delta of result.textStream) {
        text += delta;
        if (text.length >= 25) controller.abort();
      }
      expect(Date.now() - t).toBeLessThan(2000);
      expect(aborted).toBe(true);
      expect(text.length).toBeLessThan(1000);
      const direct = await generateText({ model, prompt: "slow please", abortSignal: AbortSignal.abort() }).catch((e: unknown) => e);
      expect(classifyModelError(direct)).toBe("aborted");
    } finally {
      await broken.close();
    }
  });
});
