import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection, ItemProjection } from "@/lib/api/batches";
import type { FlotillaConfigInput } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { submitBatch } from "@/server/batches/submit";
import { call, makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { type FakeAnthropic, startFakeAnthropic } from "../helpers/fake-anthropic";
import { type FakeGemini, startFakeGemini } from "../helpers/fake-gemini";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { getProjection, waitUntil, Workers } from "../loop/support";

/**
 * Batches on native provider entries, through a real worker process and the fake provider
 * servers: prompt caching as each provider takes it (Anthropic's cache_control marks on the
 * system prompt and the template's shared prefix, OpenAI's prompt_cache_key), the cache reads
 * and writes counted on items and the batch, and cost_usd priced kind by kind, exactly as the
 * fakes reported the usage. Gemini answers a typed result in its own structured-output mode.
 */

const workers = new Workers();
let t: TestDatabase;
let user: TestUser;
let anthropic: FakeAnthropic;
let openai: FakeOpenAI;
let gemini: FakeGemini;

// A system prompt and a shared context each long enough for Anthropic's 1,024-token minimum.
const SYSTEM = `You read contracts for a law firm. ${"Be precise and cite the clause you rely on. ".repeat(110)}`;
const CONTEXT = `Contract under review. ${"The supplier delivers the goods within thirty days of the order. ".repeat(90)}`;
const TEMPLATE = `${CONTEXT}\n\nQuestion: {{item}}`;
const QUESTIONS = ["Who delivers?", "By when?", "What if late?", "Who pays?", "Where to?"];

const PRICES = {
  price_per_million_input: 3,
  price_per_million_output: 15,
  price_per_million_cached_input: 0.3,
  price_per_million_cache_write: 3.75,
};
const DEFINITIONS = [{ name: "reader", description: "Reads contracts", system_prompt: SYSTEM, max_turns: 2 }];

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  user = await makeUser(t, "native");
  anthropic = await startFakeAnthropic({ handler: () => ({ type: "text", text: "Clause 1 answers it.", chunkDelayMs: 0 }) });
  openai = await startFakeOpenAI({ handler: () => ({ type: "text", text: "Clause 2 answers it.", chunkDelayMs: 0 }) });
  gemini = await startFakeGemini({ handler: () => ({ type: "text", text: '{"clause":3}', chunkDelayMs: 0 }) });
});

afterAll(async () => {
  await Promise.all([anthropic?.close(), openai?.close(), gemini?.close()]);
});

const MODELS = () => [
  { name: "claude", provider: "anthropic", base_url: anthropic.url, api_key_env: "TEST_ANTHROPIC_KEY", model: "claude-sonnet-4-5", ...PRICES },
  { name: "gpt", provider: "openai", base_url: openai.url, api_key_env: "TEST_OPENAI_KEY", model: "gpt-4o-mini", ...PRICES },
  { name: "gemini", provider: "google", base_url: gemini.url, api_key_env: "TEST_GEMINI_KEY", model: "gemini-2.5-flash", ...PRICES },
];

let spawned = false;
async function startWorker() {
  if (spawned) return;
  spawned = true;
  workers.spawn({
    FLOTILLA__MODELS: JSON.stringify(MODELS()),
    FLOTILLA__SUBAGENTS__DEFINITIONS: JSON.stringify(DEFINITIONS),
    TEST_ANTHROPIC_KEY: "sk-ant-test",
    TEST_OPENAI_KEY: "sk-openai-test",
    TEST_GEMINI_KEY: "gemini-test",
  });
  await workers.waitAlive(1);
}

async function runBatch(model: string, extra: Record<string, unknown> = {}): Promise<{ batch: BatchProjection; items: ItemProjection[] }> {
  await startWorker();
  const threadId = await makeThread(t, user);
  const config = testConfig({ models: MODELS(), subagents: { definitions: DEFINITIONS } } as FlotillaConfigInput);
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(config, "reader"),
    userId: user.userId,
    threadId,
    input: {
      submission_key: `native-${model}`,
      subagent: "reader",
      prompt_template: TEMPLATE,
      items: QUESTIONS,
      // One at a time: the first item writes the cache, every later one reads it.
      max_running_items: 1,
      ...extra,
    },
    config,
    model: { name: MODELS().find((m) => m.name === model)!.model, simulator: false, catalogName: model },
  });
  const done = await waitUntil(
    `${model} batch`,
    async () => {
      const p = await getProjection(user.token, threadId, batch.id);
      return p.status === "completed" || p.status === "failed" ? p : undefined;
    },
    60_000,
  );
  const res = await call("GET", `/api/threads/${threadId}/subagent-batches/${batch.id}/items?limit=100`, { token: user.token });
  const items = ((await res.json()) as { items: ItemProjection[] }).items;
  return { batch: done, items };
}

/** A user message's content blocks (empty when it is not a list of blocks). */
const userBlocks = (content: unknown) => (Array.isArray(content) ? (content as Array<{ text: string }>) : []);

/** US dollars for usage in the provider's own fields, at PRICES. */
const cost = (plain: number, read: number, write: number, out: number) =>
  (plain * PRICES.price_per_million_input +
    read * PRICES.price_per_million_cached_input +
    write * PRICES.price_per_million_cache_write +
    out * PRICES.price_per_million_output) /
  1e6;

describe("an anthropic entry", () => {
  it("marks the system prompt and the shared prefix; the first item writes the cache, the others read it; cost per kind", async () => {
    const before = anthropic.requests.length;
    const { batch, items } = await runBatch("claude");
    expect(batch.status).toBe("completed");
    const sent = anthropic.requests.slice(before);
    expect(sent).toHaveLength(QUESTIONS.length);

    for (const req of sent) {
      expect(req.headers["x-api-key"]).toBe("sk-ant-test");
      const system = req.body?.system as Array<{ text: string; cache_control?: unknown }>;
      expect(system).toHaveLength(1);
      expect(system[0]!.text.startsWith(SYSTEM)).toBe(true);
      expect(system[0]!.cache_control).toEqual({ type: "ephemeral" });
      const user = req.body?.messages?.[0]?.content as Array<{ type: string; text: string; cache_control?: unknown }>;
      // The shared prefix is the user message's own first block, marked; the item's rest follows unmarked.
      expect(user[0]).toEqual({ type: "text", text: `${CONTEXT}\n\nQuestion: `, cache_control: { type: "ephemeral" } });
      expect(user[1]!.cache_control).toBeUndefined();
      expect(QUESTIONS).toContain(user[1]!.text);
    }
    const first = sent[0]!.usage!;
    expect(first.cache_creation_input_tokens).toBeGreaterThan(2_000);
    expect(first.cache_read_input_tokens).toBe(0);
    for (const req of sent.slice(1)) {
      expect(req.usage!.cache_read_input_tokens).toBe(first.cache_creation_input_tokens);
      expect(req.usage!.cache_creation_input_tokens).toBe(0);
    }

    // Each item: the AI SDK's input total (plain + read + write), the cache counts, and cost per kind.
    for (const req of sent) {
      const u = req.usage!;
      const question = userBlocks(req.body?.messages?.[0]?.content)[1]?.text;
      const item = items.find((i) => i.input === question)!;
      expect(item.usage).toEqual({
        input_tokens: u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens,
        output_tokens: u.output_tokens,
        cached_input_tokens: u.cache_read_input_tokens,
        cache_write_tokens: u.cache_creation_input_tokens,
      });
      expect(item.cost_usd).toBeCloseTo(cost(u.input_tokens, u.cache_read_input_tokens, u.cache_creation_input_tokens, u.output_tokens), 12);
    }
    const sum = (k: string) => sent.reduce((n, r) => n + r.usage![k]!, 0);
    expect(batch.usage).toEqual({
      input_tokens: sum("input_tokens") + sum("cache_read_input_tokens") + sum("cache_creation_input_tokens"),
      output_tokens: sum("output_tokens"),
      cached_input_tokens: sum("cache_read_input_tokens"),
      cache_write_tokens: sum("cache_creation_input_tokens"),
    });
    expect(batch.cost_usd).toBeCloseTo(
      cost(sum("input_tokens"), sum("cache_read_input_tokens"), sum("cache_creation_input_tokens"), sum("output_tokens")),
      12,
    );
    // Cached, the batch costs well under what the same tokens cost uncached.
    expect(batch.cost_usd).toBeLessThan(0.5 * cost(batch.usage.input_tokens, 0, 0, batch.usage.output_tokens));
  }, 90_000);
});

describe("an openai entry", () => {
  it("sends prompt_cache_key flotilla:<batch_id> with the shared prefix first; cached tokens counted and priced", async () => {
    const before = openai.requests.length;
    const { batch, items } = await runBatch("gpt");
    expect(batch.status).toBe("completed");
    const sent = openai.requests.slice(before);
    expect(sent).toHaveLength(QUESTIONS.length);
    for (const req of sent) {
      expect(req.path).toBe("/v1/chat/completions");
      expect(req.headers.authorization).toBe("Bearer sk-openai-test");
      expect(req.body?.prompt_cache_key).toBe(`flotilla:${batch.id}`);
      const user = req.body?.messages?.find((m) => m.role === "user")?.content as Array<{ type: string; text: string }>;
      expect(user[0]).toEqual({ type: "text", text: `${CONTEXT}\n\nQuestion: ` });
    }
    expect(sent[0]!.usage!.cached_tokens).toBe(0);
    for (const req of sent.slice(1)) expect(req.usage!.cached_tokens).toBeGreaterThanOrEqual(2_048);

    for (const req of sent) {
      const u = req.usage!;
      const question = userBlocks(req.body?.messages?.find((m) => m.role === "user")?.content)[1]?.text;
      const item = items.find((i) => i.input === question)!;
      expect(item.usage).toEqual({
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        cached_input_tokens: u.cached_tokens,
        cache_write_tokens: 0,
      });
      expect(item.cost_usd).toBeCloseTo(cost(u.prompt_tokens! - u.cached_tokens!, u.cached_tokens!, 0, u.completion_tokens!), 12);
    }
    const sum = (k: string) => sent.reduce((n, r) => n + r.usage![k]!, 0);
    expect(batch.usage.cached_input_tokens).toBe(sum("cached_tokens"));
    expect(batch.cost_usd).toBeCloseTo(
      cost(sum("prompt_tokens") - sum("cached_tokens"), sum("cached_tokens"), 0, sum("completion_tokens")),
      12,
    );
  }, 90_000);
});

describe("a google entry", () => {
  it("answers a typed result through Gemini's response schema", async () => {
    const before = gemini.requests.length;
    const { batch, items } = await runBatch("gemini", {
      output_schema: { type: "object", properties: { clause: { type: "integer" } }, required: ["clause"] },
    });
    expect(batch.status).toBe("completed");
    expect(items.map((i) => i.output)).toEqual(QUESTIONS.map(() => ({ clause: 3 })));
    const sent = gemini.requests.slice(before);
    expect(sent[0]!.path).toBe("/v1beta/models/gemini-2.5-flash:generateContent");
    expect(sent[0]!.headers["x-goog-api-key"]).toBe("gemini-test");
    expect(sent[0]!.body?.generationConfig).toMatchObject({ responseMimeType: "application/json", responseSchema: { type: "object" } });
    // Gemini caches a repeated prefix by itself: later items read it.
    expect(batch.usage.cached_input_tokens).toBeGreaterThan(0);
  }, 90_000);
});
