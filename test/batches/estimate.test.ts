import { sql } from "drizzle-orm";
import { getEncoding } from "js-tiktoken";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchEstimateSchema } from "@/lib/api/batches";
import { getSubagentDefinition } from "@/server/agent/registry";
import { getConfig } from "@/server/config/load";
import { JUDGE_SYSTEM, judgePrompt } from "@/server/batches/checks";
import { outputAssumption, typicalJsonChars } from "@/server/batches/answer-length";
import { ASSUMED_OUTPUT_TOKENS } from "@/server/runtime/rate-limit";
import {
  type EstimatePricing,
  estimateJudges,
  estimateRows,
  JUDGE_OUTPUT_TOKENS,
  sharedPrefix,
  withJudges,
} from "@/server/batches/estimate";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * POST .../subagent-batches/estimate over a real socket and real PostgreSQL: a priced
 * OpenAI-compatible entry serving an OpenAI model id (counted with tiktoken, checked against
 * the tokenizer itself), the same 400s as the submission route for the same bad bodies with
 * nothing written, CSV and NDJSON bodies, another user's thread 404, and the time a
 * 5,000-item CSV takes; judge checks add their calls, each on its own model at its price. The
 * caching and batch-lane arithmetic is checked on estimateRows with native providers' prices.
 */

const PRICES = { price_per_million_input: 2.5, price_per_million_output: 10 };
/** A judge's model: not an OpenAI model id, so counted at ~4 characters a token. */
const GRADER_PRICES = { price_per_million_input: 1, price_per_million_output: 4 };
process.env.FLOTILLA__MODELS = JSON.stringify([
  { name: "gpt", base_url: "http://127.0.0.1:9/v1", model: "gpt-4o-mini", ...PRICES },
  { name: "grader", base_url: "http://127.0.0.1:9/v1", model: "grader-1", ...GRADER_PRICES },
]);
process.env.FLOTILLA__DEFAULT_MODEL = "gpt";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];

const t = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;
let threadId: string;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches"] });
  alice = await makeUser(t, "alice");
  bob = await makeUser(t, "bob");
  threadId = await makeThread(t, alice);
});
afterAll(async () => {
  await server?.close();
  delete process.env.FLOTILLA__MODELS;
  delete process.env.FLOTILLA__DEFAULT_MODEL;
});

async function post(path: string, body: string | object, contentType = "application/json", user = alice) {
  const res = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": contentType },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function batchCount(): Promise<number> {
  const [row] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from subagent_batches`);
  return row!.n;
}

const o200k = getEncoding("o200k_base");
const tokens = (s: string) => o200k.encode(s).length;

describe("POST .../subagent-batches/estimate", () => {
  it("counts an OpenAI model with tiktoken, prices it from the catalog, and writes nothing", async () => {
    const template = "Classify the sentiment of this review as positive or negative. Review: {{item}}";
    const items = ["I loved it", "Terrible service, never again", "Fine, I guess — nothing special"];
    const res = await post("/estimate", { submission_key: "e1", prompt_template: template, items });
    expect(res.status).toBe(200);
    const estimate = batchEstimateSchema.parse(res.body);
    const system = getSubagentDefinition("general", getConfig()).systemPrompt;
    const prefix = sharedPrefix(template);
    expect(prefix).toBe("Classify the sentiment of this review as positive or negative. Review: ");
    const expectedInput = items.reduce((n, item) => n + tokens(system) + tokens(prefix) + tokens(item), 0);
    expect(estimate).toEqual({
      // What the items would run on, named for the card.
      subagent: "general",
      model: "gpt",
      items: 3,
      input_tokens: expectedInput,
      cached_input_tokens: 0,
      output_tokens: 1_500,
      tokens_method: "tiktoken",
      // Without a schema or a max_output_tokens: the flat assumption, and it says so.
      output_per_item: { tokens: 500, from: "default" },
      // An OpenAI-compatible entry has no batch lane: no provider_batch.
      cost_usd: { live: Math.round(((expectedInput * 2.5 + 1_500 * 10) / 1e6) * 1e6) / 1e6 },
    });
    expect(await batchCount()).toBe(0);
    // The same body submits (201), and an estimate with the key now used still answers.
    expect((await post("", { submission_key: "e1", prompt_template: template, items })).status).toBe(201);
    expect((await post("/estimate", { submission_key: "e1", prompt_template: template, items })).status).toBe(200);
    expect(await batchCount()).toBe(1);
  });

  it("assumes a typed answer's length from its output schema, not a flat 500 tokens, and says so", async () => {
    // One-line tickets labelled with an enum and a short reason: ~20 tokens an answer.
    const output_schema = {
      type: "object",
      properties: { label: { enum: ["billing", "bug", "question"] }, reason: { type: "string", maxLength: 60 } },
      required: ["label", "reason"],
    };
    const items = Array.from({ length: 40 }, (_, i) => `Ticket ${i}: the invoice is wrong`);
    const res = await post("/estimate", { submission_key: "s1", items, output_schema });
    expect(res.status).toBe(200);
    const estimate = batchEstimateSchema.parse(res.body);
    // {"label":"question","reason":<60 characters>}: 2 + (5+4+10) + (6+4+62) = 93 characters, 24 tokens.
    expect(typicalJsonChars(output_schema)).toBe(93);
    expect(estimate.output_per_item).toEqual({ tokens: 24, from: "output_schema" });
    expect(estimate.output_tokens).toBe(40 * 24);
    const flat = batchEstimateSchema.parse((await post("/estimate", { submission_key: "s2", items })).body);
    expect(flat.output_per_item).toEqual({ tokens: ASSUMED_OUTPUT_TOKENS, from: "default" });
    expect(estimate.cost_usd.live).toBeLessThan(flat.cost_usd.live / 5);
  });

  it("refuses what the submission refuses, with the same 400 naming the field, and writes nothing", async () => {
    const before = await batchCount();
    const bad: Array<{ body: string | object; type?: string; field: RegExp }> = [
      { body: { submission_key: "b1", items: [] }, field: /^items: / },
      { body: { submission_key: "b2", items: ["a"], pilot: 0 }, field: /^pilot: / },
      { body: { submission_key: "b3", items: ["a"], max_cost_usd: -1 }, field: /^max_cost_usd: / },
      { body: { submission_key: "b4", items: [{ q: "x" }], prompt_template: "{{missing}}" }, field: /items\.0/ },
      { body: { submission_key: "b5", items: ["a"], checks: [{ name: "r", type: "regex", pattern: "(" }] }, field: /^checks\.0\.pattern: / },
      { body: { submission_key: "b6", items: ["a"], output_schema: { type: "nope" } }, field: /output_schema/ },
      { body: { submission_key: "b7", items: ["a"], unknown_field: 1 }, field: /unknown_field|unrecognized/i },
      { body: "q\nx\n", type: "text/csv", field: /submission_key/ },
    ];
    for (const { body, type, field } of bad) {
      const estimate = await post("/estimate", body, type);
      const submit = await post("", body, type);
      expect(estimate.status, JSON.stringify(body)).toBe(400);
      expect(estimate.body, JSON.stringify(body)).toEqual(submit.body);
      expect((estimate.body.error as { message: string }).message).toMatch(field);
    }
    expect(await batchCount()).toBe(before);
  });

  it("takes CSV and NDJSON bodies like the submission route; another user's thread is 404", async () => {
    const csv = await post("/estimate?submission_key=c1&prompt_template=Summarize%3A%20%7B%7Btext%7D%7D", "text\nalpha\nbeta\n", "text/csv");
    expect(csv.status).toBe(200);
    expect(csv.body).toMatchObject({ items: 2, output_tokens: 1_000, tokens_method: "tiktoken" });
    const ndjson = await post("/estimate?submission_key=n1", '"one"\n"two"\n"three"\n', "application/x-ndjson");
    expect(ndjson.status).toBe(200);
    expect(ndjson.body).toMatchObject({ items: 3 });
    const foreign = await post("/estimate", { submission_key: "f1", items: ["a"] }, "application/json", bob);
    expect(foreign.status).toBe(404);
    const missing = await fetch(`${server.origin}/api/threads/00000000-0000-4000-8000-000000000000/subagent-batches/estimate`, {
      method: "POST",
      headers: { authorization: `Bearer ${alice.token}`, "content-type": "application/json" },
      body: JSON.stringify({ submission_key: "m1", items: ["a"] }),
    });
    expect(missing.status).toBe(404);
  });

  it("adds each judge check's calls on its own model at its price, counted in the totals; other checks cost nothing", async () => {
    const template = "Label the sentiment: {{text}}";
    const items = [
      { text: "Great value", expected: "positive" },
      { text: "Broke on day two", expected: "negative" },
    ];
    const graded = { name: "graded", type: "judge", rubric: "Is the label right for the text?", model: "grader" } as const;
    const self = { name: "self_graded", type: "judge", rubric: "Is it one word?" } as const;
    const regex = { name: "one_word", type: "regex", pattern: "^\\w+$" } as const;
    const before = await batchCount();
    const plain = batchEstimateSchema.parse((await post("/estimate", { submission_key: "j0", prompt_template: template, items, checks: [regex] })).body);
    expect(plain.judges).toBeUndefined();
    const res = await post("/estimate", { submission_key: "j1", prompt_template: template, items, checks: [graded, self, regex] });
    expect(res.status).toBe(200);
    const judged = batchEstimateSchema.parse(res.body);

    // Each judge reads its instructions, its prompt (rubric, the item's prompt, the expected) and an answer at the output estimate.
    const judgeInput = (check: typeof graded | typeof self, count: (s: string) => number) =>
      items.reduce(
        (n, item) =>
          n + count(JUDGE_SYSTEM) + ASSUMED_OUTPUT_TOKENS + count(judgePrompt(check, { prompt: `Label the sentiment: ${item.text}`, text: "", expected: item.expected })),
        0,
      );
    const gradedInput = judgeInput(graded, (s) => Math.ceil(s.length / 4));
    const selfInput = judgeInput(self, tokens);
    const out = 2 * JUDGE_OUTPUT_TOKENS;
    const judgesCost = (gradedInput * 1 + out * 4 + selfInput * 2.5 + out * 10) / 1e6;
    expect(judged.judges).toEqual({ calls: 4, input_tokens: gradedInput + selfInput, output_tokens: 2 * out, cost_usd: expect.closeTo(judgesCost, 5) });
    expect(judged).toMatchObject({
      items: 2,
      input_tokens: plain.input_tokens + gradedInput + selfInput,
      output_tokens: plain.output_tokens + 2 * out,
      // The grader is counted at ~4 characters a token: the whole estimate is approximate.
      tokens_method: "approx",
    });
    // Each figure is rounded to the millionth of a dollar.
    expect(judged.cost_usd.live).toBeCloseTo(plain.cost_usd.live + judgesCost, 5);
    expect(await batchCount()).toBe(before);
  });

  it("estimates a 5,000-item CSV (measured)", async () => {
    const rows = Array.from({ length: 5_000 }, (_, i) => `item-${i},"Review number ${i}: the product arrived ${i % 7} days late, and the box was ${i % 2 ? "damaged" : "fine"}."`);
    const body = `item_key,text\n${rows.join("\n")}\n`;
    const template = encodeURIComponent("You are a careful analyst. Read the review and answer with one word, positive or negative.\n\nReview: {{text}}");
    const started = performance.now();
    const res = await post(`/estimate?submission_key=big&prompt_template=${template}`, body, "text/csv");
    const ms = performance.now() - started;
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ items: 5_000, output_tokens: 2_500_000, tokens_method: "tiktoken" });
    console.log(`estimate of a 5,000-item CSV: ${ms.toFixed(0)} ms`);
    expect(ms).toBeLessThan(5_000);
  });
});

describe("outputAssumption: what an item is assumed to write", () => {
  it("reads the schema's shape: enums at their longest value, strings at maxLength up to a sentence, arrays at a few items; max_output_tokens caps it", () => {
    expect(typicalJsonChars({ type: "boolean" })).toBe(5);
    expect(typicalJsonChars({ enum: ["a", "longest"] })).toBe(9);
    expect(typicalJsonChars({ type: "string" })).toBe(202);
    expect(typicalJsonChars({ type: "string", maxLength: 10_000 })).toBe(202);
    expect(typicalJsonChars({ type: "array", items: { type: "integer" } })).toBe(2 + 3 * 7);
    expect(typicalJsonChars({ type: "array", items: { type: "integer" }, maxItems: 1 })).toBe(2 + 7);
    expect(typicalJsonChars({ anyOf: [{ type: "null" }, { type: "string", maxLength: 20 }] })).toBe(22);
    expect(outputAssumption({ type: "object", properties: { ok: { type: "boolean" } } }, undefined)).toEqual({ tokens: 4, from: "output_schema" });
    // A schema answer longer than the definition lets the model write: the cap.
    expect(outputAssumption({ type: "array", items: { type: "string" }, minItems: 50 }, 300)).toEqual({ tokens: 300, from: "max_output_tokens" });
    expect(outputAssumption(null, 300)).toEqual({ tokens: 300, from: "max_output_tokens" });
    expect(outputAssumption(null, undefined)).toEqual({ tokens: 500, from: "default" });
  });
});

describe("estimateRows: caching and the batch lane", () => {
  const rows = (n: number, prefix: string) => Array.from({ length: n }, (_, i) => ({ key: `k${i}`, prompt: `${prefix}item ${i}`, input: "" }));
  const anthropic: EstimatePricing = {
    provider: "anthropic",
    model: "claude-sonnet-4-5",
    input: 3,
    output: 15,
    cachedInput: 0.3,
    cacheWrite: 3.75,
    batchDiscount: 0.5,
  };

  it("anthropic: the shared prefix is read from the cache by every item after the first, written once, and the lane is half", async () => {
    const prefix = "x".repeat(8_000); // 2,000 tokens at ~4 characters a token
    const template = `${prefix}{{item}}`;
    const e = await estimateRows({ rows: rows(10, prefix), systemPrompt: "sys!", template, pricing: anthropic });
    const perItemRest = Math.ceil("item 0".length / 4);
    const cacheable = 1 + 2_000;
    expect(e.tokens_method).toBe("approx");
    expect(e.input_tokens).toBe(10 * (cacheable + perItemRest));
    expect(e.cached_input_tokens).toBe(9 * cacheable);
    const live = ((e.input_tokens - 9 * cacheable - cacheable) * 3 + 9 * cacheable * 0.3 + cacheable * 3.75 + 5_000 * 15) / 1e6;
    expect(e.cost_usd.live).toBeCloseTo(live, 6);
    expect(e.cost_usd.provider_batch).toBeCloseTo(live * 0.5, 6);
  });

  it("judges run live on either lane: their cost is added whole to the provider batch's", async () => {
    const prefix = "x".repeat(8_000);
    const items = rows(4, prefix);
    const e = await estimateRows({ rows: items, systemPrompt: "sys!", template: `${prefix}{{item}}`, pricing: anthropic });
    const rubric = "Accurate? ".repeat(40);
    const judges = await estimateJudges({
      rows: items,
      checks: [{ name: "judged", type: "judge", rubric }],
      answerTokens: 200,
      pricingOf: () => anthropic,
    });
    const perCall = (row: (typeof items)[number]) =>
      Math.ceil(JUDGE_SYSTEM.length / 4) + 200 + Math.ceil(judgePrompt({ name: "judged", type: "judge", rubric }, { prompt: row.prompt, text: "" }).length / 4);
    const input = items.reduce((n, row) => n + perCall(row), 0);
    // Uncached: a judge's prompt carries no cache mark.
    const cost = (input * 3 + 4 * JUDGE_OUTPUT_TOKENS * 15) / 1e6;
    expect(judges).toEqual({ calls: 4, input_tokens: input, output_tokens: 400, cost_usd: expect.closeTo(cost, 6), tokens_method: "approx" });
    const both = withJudges(e, judges);
    expect(both.cached_input_tokens).toBe(e.cached_input_tokens);
    expect(both.cost_usd.live).toBeCloseTo(e.cost_usd.live + cost, 6);
    expect(both.cost_usd.provider_batch).toBeCloseTo(e.cost_usd.provider_batch! + cost, 6);
    expect(await estimateJudges({ rows: items, checks: [{ name: "r", type: "regex", pattern: "x" }], answerTokens: 200, pricingOf: () => anthropic })).toBeNull();
  });

  it("no cache below the provider's minimum, nor for one item; the simulator is free and has no lane", async () => {
    const short = await estimateRows({ rows: rows(10, "short "), systemPrompt: "", template: "short {{item}}", pricing: anthropic });
    expect(short.cached_input_tokens).toBe(0);
    const one = await estimateRows({ rows: rows(1, "x".repeat(8_000)), systemPrompt: "", template: `${"x".repeat(8_000)}{{item}}`, pricing: anthropic });
    expect(one.cached_input_tokens).toBe(0);
    const openai: EstimatePricing = { ...anthropic, provider: "openai", model: "gpt-4o", input: 2.5, output: 10, cachedInput: 1.25, cacheWrite: 2.5 };
    const prefix = "word ".repeat(1_500);
    const cached = await estimateRows({ rows: rows(3, prefix), systemPrompt: "", template: `${prefix}{{item}}`, pricing: openai, outputPerItem: { tokens: 100, from: "max_output_tokens" } });
    expect(cached.tokens_method).toBe("tiktoken");
    expect(cached.cached_input_tokens).toBe(2 * tokens(prefix));
    expect(cached.output_tokens).toBe(300);
    expect(cached.cost_usd.provider_batch).toBeCloseTo(cached.cost_usd.live * 0.5, 6);
    const simulator: EstimatePricing = { provider: "simulator", model: "simulator", input: 0, output: 0, cachedInput: 0, cacheWrite: 0, batchDiscount: null };
    const free = await estimateRows({ rows: rows(4, ""), systemPrompt: "s", template: undefined, pricing: simulator });
    expect(free).toMatchObject({ items: 4, tokens_method: "approx", cost_usd: { live: 0 } });
    expect(free.cost_usd.provider_batch).toBeUndefined();
  });
});
