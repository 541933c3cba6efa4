import Anthropic from "@anthropic-ai/sdk";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { type FakeAnthropic, startFakeAnthropic } from "../helpers/fake-anthropic";
import { type FakeGemini, startFakeGemini } from "../helpers/fake-gemini";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";

// The fake provider servers are only worth their tests if they speak the providers' wire formats:
// the official clients (and the AI SDK's provider packages) read them here, cache fields included.

const LONG = "Shared context. ".repeat(400); // 6,400 characters: ~1,600 tokens, over every minimum

describe("fake Anthropic, read by @anthropic-ai/sdk", () => {
  let fake: FakeAnthropic;
  let client: Anthropic;
  beforeAll(async () => {
    fake = await startFakeAnthropic();
    client = new Anthropic({ apiKey: "sk-ant-test", baseURL: fake.server.origin, maxRetries: 0 });
  });
  afterAll(() => fake.close());

  const system = [{ type: "text" as const, text: LONG, cache_control: { type: "ephemeral" as const } }];

  it("writes a marked prefix on first sight and reads it afterwards; input_tokens excludes both", async () => {
    const first = await client.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      system,
      messages: [{ role: "user", content: "first question" }],
    });
    expect(first.content).toEqual([{ type: "text", text: "Echo: first question" }]);
    const written = first.usage.cache_creation_input_tokens ?? 0;
    expect(written).toBeGreaterThanOrEqual(1600);
    expect(first.usage.cache_read_input_tokens).toBe(0);
    expect(first.usage.input_tokens).toBeGreaterThan(0);
    expect(first.usage.input_tokens).toBeLessThan(20);

    const second = await client.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      system,
      messages: [{ role: "user", content: "a second, different question" }],
    });
    expect(second.usage.cache_read_input_tokens).toBe(written);
    expect(second.usage.cache_creation_input_tokens).toBe(0);
    // This SDK version sends the key as a bearer token; @ai-sdk/anthropic sends x-api-key.
    expect(fake.requests.at(-1)?.headers.authorization).toBe("Bearer sk-ant-test");
  });

  it("streams text and tool_use blocks with usage the SDK's final message carries", async () => {
    const stream = client.messages.stream({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      system,
      tools: [{ name: "lookup", description: "Look up", input_schema: { type: "object", properties: { q: { type: "string" } } } }],
      messages: [{ role: "user", content: 'find it [[call:lookup {"q":"x"}]]' }],
    });
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    const use = message.content.find((b) => b.type === "tool_use");
    expect(use).toMatchObject({ type: "tool_use", name: "lookup", input: { q: "x" } });
    // The tools come before the system block in the cached prefix: a new prefix, written now.
    expect(message.usage.cache_creation_input_tokens).toBeGreaterThan(1600);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
  });

  it("does not cache a marked prefix shorter than the minimum, nor an unmarked one", async () => {
    for (let i = 0; i < 2; i++) {
      const short = await client.messages.create({
        model: "claude-sonnet-4-5",
        max_tokens: 10,
        system: [{ type: "text", text: "short system", cache_control: { type: "ephemeral" } }],
        messages: [{ role: "user", content: "hi" }],
      });
      expect(short.usage).toMatchObject({ cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
      const unmarked = await client.messages.create({
        model: "claude-sonnet-4-5",
        max_tokens: 10,
        system: `${LONG} unmarked`,
        messages: [{ role: "user", content: "hi" }],
      });
      expect(unmarked.usage).toMatchObject({ cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
      expect(unmarked.usage.input_tokens).toBeGreaterThan(1600);
    }
  });

  it("answers errors in Anthropic's shape, which the SDK raises with their status", async () => {
    const err = await client.messages
      .create({ model: "claude-sonnet-4-5", max_tokens: 10, messages: [{ role: "user", content: "[[429]]" }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
  });

  it("is read by @ai-sdk/anthropic: cache reads and writes reach the AI SDK's usage", async () => {
    const anthropic = createAnthropic({ baseURL: fake.url, apiKey: "k" });
    const model = anthropic("claude-sonnet-4-5");
    const messages = [
      { role: "system" as const, content: `${LONG} via the AI SDK`, providerOptions: { anthropic: { cacheControl: { type: "ephemeral" } } } },
      { role: "user" as const, content: "hello" },
    ];
    const a = await generateText({ model, messages });
    expect(a.text).toBe("Echo: hello");
    const body = fake.requests.at(-1)?.body;
    expect(fake.requests.at(-1)?.headers["x-api-key"]).toBe("k");
    expect(body?.system).toEqual([{ type: "text", text: `${LONG} via the AI SDK`, cache_control: { type: "ephemeral" } }]);
    expect(a.usage.inputTokenDetails.cacheWriteTokens).toBeGreaterThan(1600);
    const b = streamText({ model, messages });
    expect(await b.text).toBe("Echo: hello");
    const usage = await b.usage;
    expect(usage.inputTokenDetails.cacheReadTokens).toBe(a.usage.inputTokenDetails.cacheWriteTokens);
    expect(usage.inputTokens).toBe(a.usage.inputTokens);
  });

  it("answers a typed result through output_config and through the forced json tool", async () => {
    const typed = await startFakeAnthropic({ handler: () => ({ type: "text", text: '{"n":7}' }) });
    try {
      const anthropic = createAnthropic({ baseURL: typed.url, apiKey: "k" });
      const output = Output.object({ schema: z.object({ n: z.number() }) });
      const native = await generateText({ model: anthropic("claude-sonnet-4-5"), prompt: "n?", output });
      expect(native.output).toEqual({ n: 7 });
      expect(typed.requests.at(-1)?.body?.output_config).toMatchObject({ format: { type: "json_schema" } });
      const viaTool = await generateText({
        model: anthropic("claude-sonnet-4-5"),
        prompt: "n?",
        output,
        providerOptions: { anthropic: { structuredOutputMode: "jsonTool" } },
      });
      expect(viaTool.output).toEqual({ n: 7 });
      expect(typed.requests.at(-1)?.body?.tool_choice).toMatchObject({ type: "any" });
      expect(typed.requests.at(-1)?.body?.tools?.map((t) => t.name)).toEqual(["json"]);
    } finally {
      await typed.close();
    }
  });
});

describe("fake OpenAI, read by the openai client", () => {
  let fake: FakeOpenAI;
  let client: OpenAI;
  beforeAll(async () => {
    fake = await startFakeOpenAI();
    client = new OpenAI({ apiKey: "sk-test", baseURL: fake.url, maxRetries: 0 });
  });
  afterAll(() => fake.close());

  it("reports a repeated prefix of 1,024+ tokens as cached_tokens, per prompt_cache_key", async () => {
    const ask = (q: string, key?: string) =>
      client.chat.completions.create({
        model: "gpt-fake",
        messages: [
          { role: "system", content: LONG },
          { role: "user", content: q },
        ],
        ...(key ? { prompt_cache_key: key } : {}),
      });
    const first = await ask("one", "flotilla:a");
    expect(first.choices[0].message.content).toBe("Echo: one");
    expect(first.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
    const second = await ask("two", "flotilla:a");
    const cached = second.usage?.prompt_tokens_details?.cached_tokens ?? 0;
    expect(cached).toBeGreaterThanOrEqual(1024);
    expect((cached - 1024) % 128).toBe(0);
    expect(cached).toBeLessThanOrEqual(second.usage?.prompt_tokens ?? 0);
    expect(fake.requests.at(-1)?.body?.prompt_cache_key).toBe("flotilla:a");
    // Another key is another cache.
    expect((await ask("three", "flotilla:b")).usage?.prompt_tokens_details?.cached_tokens).toBe(0);
  });

  it("streams with usage (cached tokens included) in the last chunk", async () => {
    const stream = await client.chat.completions.create({
      model: "gpt-fake",
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: "system", content: LONG },
        { role: "user", content: "streamed" },
      ],
      prompt_cache_key: "flotilla:a",
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe("Echo: streamed");
    expect(usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(1024);
  });

  it("is read by @ai-sdk/openai's chat model: promptCacheKey sent, cached tokens in the usage", async () => {
    const openai = createOpenAI({ baseURL: fake.url, apiKey: "k" });
    const run = () =>
      generateText({
        model: openai.chat("gpt-fake"),
        system: `${LONG} for the AI SDK`,
        prompt: "q",
        providerOptions: { openai: { promptCacheKey: "flotilla:sdk" } },
      });
    await run();
    const r = await run();
    expect(fake.requests.at(-1)?.body?.prompt_cache_key).toBe("flotilla:sdk");
    expect(r.usage.inputTokenDetails.cacheReadTokens).toBeGreaterThanOrEqual(1024);
  });
});

describe("fake Gemini, read by @ai-sdk/google", () => {
  let fake: FakeGemini;
  beforeAll(async () => {
    fake = await startFakeGemini();
  });
  afterAll(() => fake.close());

  it("answers generateContent and streamGenerateContent with usageMetadata, a repeated prefix cached", async () => {
    const google = createGoogleGenerativeAI({ baseURL: fake.url, apiKey: "g-key" });
    const model = google("gemini-2.5-flash");
    const a = await generateText({ model, system: LONG, prompt: "first" });
    expect(a.text).toBe("Echo: first");
    expect(fake.requests.at(-1)?.path).toBe("/v1beta/models/gemini-2.5-flash:generateContent");
    expect(fake.requests.at(-1)?.headers["x-goog-api-key"]).toBe("g-key");
    expect(a.usage.inputTokenDetails.cacheReadTokens).toBe(0);
    const b = streamText({ model, system: LONG, prompt: "second" });
    expect(await b.text).toBe("Echo: second");
    expect(fake.requests.at(-1)?.path).toBe("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    const usage = await b.usage;
    expect(usage.inputTokenDetails.cacheReadTokens).toBeGreaterThanOrEqual(1024);
    expect(usage.inputTokens).toBeGreaterThan(usage.inputTokenDetails.cacheReadTokens ?? 0);
  });

  it("calls a tool and reads its result back", async () => {
    const google = createGoogleGenerativeAI({ baseURL: fake.url, apiKey: "g-key" });
    const r = await generateText({
      model: google("gemini-2.5-flash"),
      prompt: 'go [[call:add {"a":2,"b":3}]]',
      tools: { add: tool({ inputSchema: z.object({ a: z.number(), b: z.number() }), execute: async ({ a, b }) => ({ sum: a + b }) }) },
      stopWhen: stepCountIs(3),
    });
    expect(r.text).toMatch(/^Tool results: .*"sum":5/);
    expect(r.steps[0].toolCalls[0]).toMatchObject({ toolName: "add", input: { a: 2, b: 3 } });
  });

  it("answers a typed result as JSON when asked for application/json", async () => {
    const typed = await startFakeGemini({ handler: () => ({ type: "text", text: '{"city":"Oslo"}' }) });
    try {
      const google = createGoogleGenerativeAI({ baseURL: typed.url, apiKey: "g-key" });
      const r = await generateText({
        model: google("gemini-2.5-flash"),
        prompt: "where?",
        output: Output.object({ schema: z.object({ city: z.string() }) }),
      });
      expect(r.output).toEqual({ city: "Oslo" });
      expect(typed.requests.at(-1)?.body?.generationConfig).toMatchObject({ responseMimeType: "application/json" });
    } finally {
      await typed.close();
    }
  });
});
