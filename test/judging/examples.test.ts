import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchEstimate, BatchProjection } from "@/lib/api/batches";
import type { CompareSummary } from "@/lib/api/compare";
import type { GoldenSetCreated } from "@/lib/api/golden-sets";
import type { VariantDraft } from "@/lib/api/variants";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { type AnthropicRequest, type FakeAnthropic, startFakeAnthropic } from "../helpers/fake-anthropic";
import { send, startWebServer, type WebServer } from "../helpers/web-server";
import { Workers } from "../loop/support";

/**
 * Corrections as examples (DESIGN "Reviews that teach"), over real HTTP sockets and a real worker
 * process on the native anthropic provider (the local fake Anthropic): a submission's `examples`
 * put the golden set's first `count` items by md5(item_key) before every item's prompt as
 * input -> answer pairs, in the user message's first block, the one marked for the prompt cache;
 * an item that is itself an example sees the next one instead, never itself; the same batch
 * twice sends the same prompts; the examples are read once at submission (an add to the set
 * while the batch is paused changes nothing). Bad `examples` are 400s naming the field that write
 * nothing; the estimate grows with `count`; a variant keeps, or with null drops, the examples,
 * and the comparison's differences say so.
 */

const workers = new Workers();
let anthropic: FakeAnthropic;
let t: TestDatabase;
let server: WebServer;
let owner: TestUser;
let stranger: TestUser;
let thread: string;

// Long enough for Anthropic's 1,024-token minimum with the tool-less system prompt alone.
const SYSTEM = `You answer short questions. ${"Answer in one short sentence and nothing else. ".repeat(100)}`;
const DEFINITIONS = [{ name: "answerer", description: "answers", system_prompt: SYSTEM, tool_groups: [], max_turns: 2, model: "claude" }];
const MODELS = () => [
  {
    name: "claude",
    provider: "anthropic",
    base_url: anthropic.url,
    api_key_env: "FAKE_PROVIDER_KEY",
    model: "claude-sonnet-4-5",
    price_per_million_input: 3,
    price_per_million_output: 15,
  },
];

/** The golden set's items: a question and the answer people settled on. */
const GOLDEN = Array.from({ length: 6 }, (_, i) => ({ item_key: `g${i + 1}`, input: `golden question ${i + 1}`, expected: `golden answer ${i + 1}` }));
const md5 = (s: string) => createHash("md5").update(s).digest("hex");
/** The set's keys in md5 order, computed here independently of the server. */
const byMd5 = (keys: string[]) => [...keys].sort((a, b) => (md5(a) < md5(b) ? -1 : md5(a) > md5(b) ? 1 : a < b ? -1 : 1));
const ORDER = byMd5(GOLDEN.map((g) => g.item_key));
const line = (key: string) => {
  const g = GOLDEN.find((x) => x.item_key === key)!;
  return JSON.stringify({ input: g.input, answer: g.expected });
};

let setId: string;

beforeAll(async () => {
  anthropic = await startFakeAnthropic({ handler: () => ({ type: "text", text: "An answer.", chunkDelayMs: 0 }) });
  // The routes read the catalog from the environment (once); the worker process gets the same.
  process.env.FLOTILLA__MODELS = JSON.stringify(MODELS());
  process.env.FLOTILLA__SUBAGENTS__DEFINITIONS = JSON.stringify(DEFINITIONS);
  process.env.FAKE_PROVIDER_KEY = "fake-key";
  t = await setupApiDatabase();
  workers.use(t);
  workers.spawn({ FLOTILLA__MODELS: JSON.stringify(MODELS()), FLOTILLA__SUBAGENTS__DEFINITIONS: JSON.stringify(DEFINITIONS), FAKE_PROVIDER_KEY: "fake-key" });
  server = await startWebServer();
  owner = await makeUser(t, "owner");
  stranger = await makeUser(t, "stranger");
  thread = await makeThread(t, owner);
  await workers.waitAlive(1);
  setId = (await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "Answers people gave", items: GOLDEN } }, 201)).id;
}, 120_000);

afterAll(async () => {
  await server?.close();
  await anthropic?.close();
});

async function http<T = unknown>(path: string, options: { json?: unknown; method?: string; user?: TestUser } = {}) {
  const res = await send(server, path, { method: options.method, headers: { authorization: `Bearer ${(options.user ?? owner).token}` }, json: options.json });
  return { status: res.status, body: (res.body ? JSON.parse(res.body) : null) as T };
}
async function ok<T>(path: string, options: { json?: unknown; method?: string; user?: TestUser } = {}, status = 200): Promise<T> {
  const res = await http<T>(path, options);
  expect(res.status, `${path}: ${JSON.stringify(res.body).slice(0, 300)}`).toBe(status);
  return res.body;
}
const messageOf = (body: unknown) => (body as { error: { message: string } }).error.message;
const batches = () => `/api/threads/${thread}/subagent-batches`;

async function until(batchId: string, done: (b: BatchProjection) => boolean): Promise<BatchProjection> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const body = await ok<BatchProjection>(`${batches()}/${batchId}`);
    if (done(body)) return body;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`batch ${batchId} did not get there`);
}
const settled = (b: BatchProjection) => b.status === "completed" || b.status === "failed";

/** The batch's items: one of them (ORDER[0]) is an example itself; the others are not in the set. */
const ITEMS = [
  { item_key: "q-one", q: "What is one plus one?" },
  { item_key: ORDER[0]!, q: "golden question again" },
  { item_key: "q-two", q: "What colour is the sky?" },
  { item_key: "q-three", q: "Who wrote Hamlet?" },
];
const submission = (key: string, extra: Record<string, unknown> = {}) => ({
  submission_key: key,
  subagent: "answerer",
  items: ITEMS,
  prompt_template: "Question: {{q}}",
  max_running_items: 1,
  examples: { golden_set: setId, count: 3 },
  ...extra,
});

type Block = { type: string; text: string; cache_control?: unknown };
/** Requests the fake received for this batch's items, by the question they end with. */
function sentFor(from: number): Map<string, Block[]> {
  const out = new Map<string, Block[]>();
  for (const req of anthropic.requests.slice(from) as AnthropicRequest[]) {
    const content = req.body?.messages?.[0]?.content;
    const blocks = (typeof content === "string" ? [{ type: "text", text: content }] : (content as Block[])) ?? [];
    const text = blocks.map((b) => b.text).join("");
    const item = ITEMS.find((i) => text.endsWith(`Question: ${i.q}`));
    if (item) out.set(item.item_key, blocks);
  }
  return out;
}

const exampleLines = (text: string) =>
  text
    .split("\n")
    .slice(text.split("\n").indexOf("BEGIN EXAMPLES") + 1, text.split("\n").indexOf("END EXAMPLES"));

describe("examples in the prompt", () => {
  let firstRun: Map<string, Block[]>;

  it("go before each item's prompt in the cached prefix, the first count by md5(item_key), never the item itself", async () => {
    const from = anthropic.requests.length;
    const created = await ok<BatchProjection>(batches(), { json: submission("ex-1") }, 201);
    expect((await until(created.id, settled)).status).toBe("completed");
    firstRun = sentFor(from);
    expect([...firstRun.keys()].sort()).toEqual(ITEMS.map((i) => i.item_key).sort());

    const shared = [ORDER[0], ORDER[1], ORDER[2]].map((k) => line(k!));
    for (const key of ["q-one", "q-two", "q-three"]) {
      const blocks = firstRun.get(key)!;
      // The examples and the template's text before {{q}}: one block, marked for the cache; the question after it, unmarked.
      expect(blocks).toHaveLength(2);
      expect(blocks[0]!.cache_control).toEqual({ type: "ephemeral" });
      expect(blocks[0]!.text.endsWith("END EXAMPLES\n\nQuestion: ")).toBe(true);
      expect(exampleLines(blocks[0]!.text)).toEqual(shared);
      expect(blocks[1]!.cache_control).toBeUndefined();
      expect(blocks[1]!.text).toBe(ITEMS.find((i) => i.item_key === key)!.q);
      // The item's own question never sits in the cached prefix.
      expect(blocks[0]!.text).not.toContain(ITEMS.find((i) => i.item_key === key)!.q);
    }
    // The example answering itself: the next one in md5 order takes its place.
    const own = firstRun.get(ORDER[0]!)!.map((b) => b.text).join("");
    expect(exampleLines(own)).toEqual([ORDER[1], ORDER[2], ORDER[3]].map((k) => line(k!)));
    expect(own).not.toContain(line(ORDER[0]!));
  });

  it("sends the same prompts when the same batch runs again", async () => {
    const from = anthropic.requests.length;
    const created = await ok<BatchProjection>(batches(), { json: submission("ex-2") }, 201);
    expect((await until(created.id, settled)).status).toBe("completed");
    const again = sentFor(from);
    for (const item of ITEMS) expect(again.get(item.item_key)).toEqual(firstRun.get(item.item_key));
  });

  it("are read once at submission: an add to the set while the batch waits changes none of its prompts", async () => {
    const from = anthropic.requests.length;
    const created = await ok<BatchProjection>(batches(), { json: submission("ex-3", { pilot: 1 }) }, 201);
    await until(created.id, (b) => b.status === "paused");
    // A key that sorts before every example by md5, with a new answer: it would be the first example now.
    let n = 0;
    while (md5(`early-${n}`) >= md5(ORDER[0]!)) n++;
    const added = await ok<{ version: number }>(`/api/golden-sets/${setId}/add`, {
      json: { items: [{ item_key: `early-${n}`, input: "a question added later", expected: "an answer added later" }] },
    });
    expect(added.version).toBe(2);
    await ok(`${batches()}/${created.id}/resume`, { json: {} });
    expect((await until(created.id, settled)).status).toBe("completed");
    const sent = sentFor(from);
    expect(sent.size).toBe(ITEMS.length);
    for (const item of ITEMS) expect(sent.get(item.item_key)).toEqual(firstRun.get(item.item_key));
  });
});

describe("refusals", () => {
  it("are 400s naming the field, and write nothing", async () => {
    const stranger_set = (await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "theirs", items: GOLDEN }, user: stranger }, 201)).id;
    // Two answers of 60,000 characters each: more text than one item's prompt may be (100,000).
    const long = (await ok<GoldenSetCreated>("/api/golden-sets", {
      json: { name: "long", items: [1, 2].map((i) => ({ item_key: `long-${i}`, input: `${i}${"x".repeat(60_000)}`, expected: "y" })) },
    }, 201)).id;
    const before = (await ok<{ batches: unknown[] }>(batches())).batches.length;
    const cases: Array<[unknown, RegExp]> = [
      [{ golden_set: "00000000-0000-4000-8000-000000000000", count: 2 }, /^examples\.golden_set: no golden set/],
      [{ golden_set: "not-a-uuid", count: 2 }, /^examples\.golden_set: no golden set/],
      [{ golden_set: stranger_set, count: 2 }, /^examples\.golden_set: no golden set/],
      [{ golden_set: setId, version: 9, count: 2 }, /^examples\.version: this set has versions 1 to 2/],
      [{ golden_set: setId, version: 1, count: 7 }, /^examples\.count: version 1 of this set holds 6 items/],
      [{ golden_set: setId, count: 0 }, /^examples\.count: must be between 1 and 20/],
      [{ golden_set: setId, count: 21 }, /^examples\.count: must be between 1 and 20/],
      [{ golden_set: setId, count: 2.5 }, /^examples\.count: must be a whole number/],
      [{ count: 2 }, /^examples\.golden_set: is required/],
      [{ golden_set: setId, count: 2, extra: 1 }, /^examples/],
      [{ golden_set: long, count: 2 }, /^examples\.count: 2 examples of this set are \d+ characters as text; at most 100000/],
    ];
    for (const [examples, message] of cases) {
      for (const path of [batches(), `${batches()}/estimate`]) {
        const res = await http(path, { json: submission(`bad-${JSON.stringify(examples)}`, { examples }) });
        expect(res.status, `${path} ${JSON.stringify(examples)}`).toBe(400);
        expect(messageOf(res.body)).toMatch(message);
      }
    }
    expect((await ok<{ batches: unknown[] }>(batches())).batches.length).toBe(before);
  });
});

describe("the estimate", () => {
  it("counts the examples' tokens: it grows with count", async () => {
    const tokens: number[] = [];
    const without = await ok<BatchEstimate>(`${batches()}/estimate`, { json: submission("est", { examples: undefined }) });
    tokens.push(without.input_tokens);
    for (const count of [1, 3, 6]) {
      const e = await ok<BatchEstimate>(`${batches()}/estimate`, { json: submission("est", { examples: { golden_set: setId, version: 1, count } }) });
      tokens.push(e.input_tokens);
    }
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!, JSON.stringify(tokens)).toBeGreaterThan(tokens[i - 1]!);
    // Each item's prompt carries the examples: 4 items, and more than 4 example lines' worth per step up.
    expect(tokens[3]! - tokens[2]!).toBeGreaterThanOrEqual(ITEMS.length * 3 * Math.floor(line("g1").length / 4) - ITEMS.length * 4);
  });
});

describe("a variant", () => {
  it("keeps the original's examples, drops them with null, and the comparison's differences show the change", async () => {
    const original = await ok<BatchProjection>(batches(), { json: submission("var-base", { examples: { golden_set: setId, version: 1, count: 5 } }) }, 201);
    await until(original.id, settled);
    const draft = await ok<VariantDraft>(`${batches()}/${original.id}/variant`);
    expect(draft.examples).toEqual({ golden_set: setId, version: 1, count: 5 });

    const kept = await ok<BatchProjection>(`${batches()}/${original.id}/variant`, { json: { submission_key: "var-kept" } }, 201);
    const dropped = await ok<BatchProjection>(`${batches()}/${original.id}/variant`, { json: { submission_key: "var-drop", examples: null } }, 201);
    await until(kept.id, settled);
    await until(dropped.id, settled);
    const same = await ok<CompareSummary>(`${batches()}/${original.id}/compare/${kept.id}`);
    expect(same.differences.find((d) => d.setting === "examples")).toBeUndefined();
    const diff = await ok<CompareSummary>(`${batches()}/${dropped.id}/compare/${original.id}`);
    expect(diff.differences.find((d) => d.setting === "examples")).toEqual({
      setting: "examples",
      a: null,
      b: `5 examples from golden set "Answers people gave" (${setId}), version 1`,
    });
    expect(diff.items.matched).toBe(ITEMS.length);

    const bad = await http(`${batches()}/${original.id}/variant`, { json: { submission_key: "var-bad", examples: { golden_set: setId, count: 30 } } });
    expect(bad.status).toBe(400);
    expect(messageOf(bad.body)).toMatch(/^examples\.count: must be between 1 and 20/);
  });
});
