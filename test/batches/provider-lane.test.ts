import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { sql } from "drizzle-orm";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { FlotillaConfigInput } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { cancelBatch, getBatch, pauseBatch, resumeBatch } from "@/server/batches/repository";
import { createGoldenSet } from "@/server/batches/golden-sets";
import { submitBatch } from "@/server/batches/submit";
import { type AnthropicHandler, defaultAnthropicHandler, type FakeAnthropic, startFakeAnthropic } from "../helpers/fake-anthropic";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { addAnthropicBatches, addOpenAIBatches, type BatchControls, type FakeBatches, HONEST } from "../helpers/fake-provider-batches";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { counterDrift, makeOwner, sleep, testConfig } from "./support";

/**
 * `lane: "provider_batch"` through real worker processes (server/worker/main.ts) against the fake
 * providers' batch endpoints: prices at the batch discount, no slot while at the provider, pause,
 * cancel at the provider, expiry back to the live lane or failed, typed results (a repair turn
 * live), errored requests retried within max_attempts, and a poller killed with SIGKILL mid-poll
 * whose provider batch another worker takes over, nothing lost or settled twice.
 */

let t: TestDatabase;
let anthropic: FakeAnthropic;
let openai: FakeOpenAI;
const children = new Set<ChildProcess>();
const PRICES = { price_per_million_input: 3, price_per_million_output: 15 };
const SYSTEM = "You label things. Answer with one word.";

const REPAIRED = { label: "repaired" };

/**
 * Typed requests (output_config.format, or the forced json tool) answer `{"label": X}` for an
 * item reading `label=X` (`label=NUMBER`: 7, which the schema refuses), and the repair turn
 * REPAIRED; everything else as the default fake.
 */
const typedOrDefault: AnthropicHandler = (req, index) => {
  const body = req.body;
  // A provider reporting counts out of range (the lane refuses the answer and bills nothing).
  if (JSON.stringify(body?.messages ?? "").includes("huge-usage")) return { type: "text", text: "counted", usage: { prompt_tokens: 1e30, completion_tokens: -5 } };
  if (!body?.output_config?.format && !body?.tools?.some((tool) => tool.name === "json")) return defaultAnthropicHandler(req, index);
  const last = JSON.stringify(body.messages?.at(-1)?.content ?? "");
  if (last.includes("not valid against the required JSON Schema")) return { type: "text", text: JSON.stringify(REPAIRED) };
  const label = /label=(\w+)/.exec(last)?.[1] ?? "none";
  return { type: "text", text: JSON.stringify({ label: label === "NUMBER" ? 7 : label }) };
};

beforeAll(async () => {
  t = await createTestDatabase();
  anthropic = await startFakeAnthropic({ handler: typedOrDefault });
  openai = await startFakeOpenAI();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await anthropic.close();
  await openai.close();
});

afterEach(async () => {
  await stopAll();
});

function models() {
  return [
    { name: "claude", provider: "anthropic" as const, base_url: anthropic.url, model: "claude-sonnet-4-5", api_key_env: "FAKE_PROVIDER_KEY", ...PRICES },
    { name: "gpt", provider: "openai" as const, base_url: openai.url, model: "gpt-4o-mini", api_key_env: "FAKE_PROVIDER_KEY", ...PRICES },
  ];
}

function config(over: FlotillaConfigInput = {}) {
  return testConfig({
    models: models(),
    subagents: { definitions: [{ name: "labeler", description: "labels", system_prompt: SYSTEM, tool_groups: [] }] },
    ...over,
  });
}

function spawnWorker(env: Record<string, string> = {}): ChildProcess {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    cwd: process.cwd(),
    env: {
      ...base,
      DATABASE_URL: t.url,
      LOG_LEVEL: "warn",
      NODE_ENV: "production",
      FLOTILLA__MODELS: JSON.stringify(models()),
      FAKE_PROVIDER_KEY: "fake-key",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
      FLOTILLA__PROVIDER_BATCH__POLL_SECONDS: "0.1",
      FLOTILLA__SIMULATOR__LATENCY_MS: "20",
      ...env,
    },
    stdio: ["ignore", "ignore", process.env.DEBUG_WORKERS ? "inherit" : "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d) => {
    stderr += String(d);
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  child.on("exit", (code, signal) => {
    children.delete(child);
    if (code !== 0 && signal === null) console.error(`worker exited with ${code}: ${stderr}`);
  });
  children.add(child);
  return child;
}

async function workersUp(): Promise<void> {
  const want = children.size;
  await until("the workers to start", async () => {
    const [r] = await t.db.execute<{ n: number }>(
      sql`select count(*)::int as n from worker_heartbeats where stopped_at is null and last_heartbeat_at > now() - interval '5 seconds'`,
    );
    return r!.n;
  }, (n) => n >= want);
}

async function stopAll(): Promise<void> {
  await Promise.all(
    [...children].map((child) => new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      child.kill("SIGTERM");
    })),
  );
}

async function until<T>(what: string, read: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v)}`);
    await sleep(100);
  }
}

async function submit(owner: { userId: string; threadId: string }, args: { key: string; n: number; model?: string; over?: object; subagent?: string }) {
  const cfg = config();
  const sub = args.subagent ?? "labeler";
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(cfg, sub),
    ...owner,
    config: cfg,
    model: { name: args.model ?? "claude", simulator: false, catalogName: args.model ?? "claude" },
    input: { submission_key: args.key, subagent: sub, items: Array.from({ length: args.n }, (_, i) => `thing ${i}`), lane: "provider_batch", ...args.over },
  });
  return batch;
}

const batchRow = (owner: { userId: string; threadId: string }, batchId: string) => getBatch(t.db, { ...owner, batchId });
const terminal = (b: { status: string }) => ["completed", "failed", "cancelled"].includes(b.status);

async function items(batchId: string) {
  return t.db.execute<{ id: string; status: string; input_tokens: number; output_tokens: number; cost_usd: number; error: string | null; result: string | null; attempts: number }>(
    sql`select id, status, input_tokens::int, output_tokens::int, cost_usd, error, result, attempts from subagent_batch_items where batch_id = ${batchId} order by position`,
  );
}

function controls(fake: FakeBatches, over: Partial<BatchControls>) {
  Object.assign(fake.controls, { finishAfterPolls: 0, hold: false, perPoll: Number.POSITIVE_INFINITY, errorIf: () => false, pollDelayMs: 0, ...HONEST }, over);
}

let anthropicBatches: FakeBatches;
let openaiBatches: FakeBatches;
beforeAll(() => {
  anthropicBatches = addAnthropicBatches(anthropic);
  openaiBatches = addOpenAIBatches(openai);
});

describe("lane: provider_batch through real workers", () => {
  it("refuses the lane for a model without a batch API or a sub-agent with tools, naming lane, writing nothing", async () => {
    const owner = await makeOwner(t.db);
    await expect(submit(owner, { key: "sim", n: 1, model: "simulator" })).rejects.toThrow(/^lane: provider_batch needs an openai or anthropic model/);
    await expect(submit(owner, { key: "tools", n: 1, subagent: "general" })).rejects.toThrow(/^lane: provider_batch sends one model call an item; the sub-agent "general" has tool groups/);
    const [n] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from subagent_batches where user_id = ${owner.userId}`);
    expect(n!.n).toBe(0);
  });

  it("anthropic: every item settles from the provider batch, priced at exactly usage x prices x 0.5", async () => {
    controls(anthropicBatches, { finishAfterPolls: 2 });
    const owner = await makeOwner(t.db);
    const before = anthropic.requests.length;
    const batch = await submit(owner, { key: "full-anthropic", n: 40 });
    spawnWorker();
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "completed", succeededCount: 40, lane: "provider_batch" });
    const rows = await items(batch.id);
    let sum = 0;
    for (const r of rows) {
      expect(r.input_tokens).toBeGreaterThan(0);
      expect(r.result).toBeTruthy();
      const expected = ((r.input_tokens * 3 + r.output_tokens * 15) / 1e6) * 0.5;
      expect(Math.abs(r.cost_usd - expected)).toBeLessThan(1e-15);
      sum += expected;
    }
    expect(Math.abs(done.costUsd - sum)).toBeLessThan(1e-12);
    // One provider batch of 40 requests, custom_id = item id, bodies as the live call sends them; no live call.
    const created = anthropic.requests.slice(before).filter((r) => r.path === "/v1/messages/batches");
    expect(created).toHaveLength(1);
    const reqs = (created[0]!.body as { requests: { custom_id: string; params: Record<string, unknown> }[] }).requests;
    expect(reqs.map((r) => r.custom_id).sort()).toEqual(rows.map((r) => r.id).sort());
    expect(reqs[0]!.params).toMatchObject({ model: "claude-sonnet-4-5", system: [{ type: "text", text: SYSTEM }] });
    expect(JSON.stringify(reqs[0]!.params.messages)).toContain("thing 0");
    expect(anthropic.requests.slice(before).filter((r) => r.path === "/v1/messages")).toHaveLength(0);
    const [pb] = await t.db.execute<{ state: string; requests: number; succeeded: number }>(
      sql`select state, requests, succeeded from provider_batches where batch_id = ${batch.id}`,
    );
    expect(pb).toEqual({ state: "settled", requests: 40, succeeded: 40 });
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 150_000);

  it("anthropic: a long shared prefix is marked for the prompt cache in the batch's requests, as a live item marks it", async () => {
    controls(anthropicBatches, { finishAfterPolls: 0 });
    const owner = await makeOwner(t.db);
    const before = anthropic.requests.length;
    // Past Anthropic's 1,024-token minimum (about 4,096 characters) with the system prompt.
    const prefix = `Label this support ticket. ${"Tickets about screens, keyboards or cables are hardware. ".repeat(90)}Ticket: `;
    const batch = await submit(owner, { key: "cached-prefix", n: 3, over: { prompt_template: `${prefix}{{item}}` } });
    spawnWorker();
    expect(await until("the batch to finish", () => batchRow(owner, batch.id), terminal)).toMatchObject({ status: "completed", succeededCount: 3 });
    const created = anthropic.requests.slice(before).filter((r) => r.path === "/v1/messages/batches");
    const reqs = (created[0]!.body as { requests: { params: { messages: { role: string; content: unknown }[] } }[] }).requests;
    expect(reqs).toHaveLength(3);
    for (const r of reqs)
      expect(r.params.messages[0]!.content).toEqual([
        { type: "text", text: expect.stringMatching(/^Label this support ticket\. .*Ticket:/), cache_control: { type: "ephemeral" } },
        { type: "text", text: expect.stringMatching(/thing \d$/) },
      ]);
  }, 150_000);

  it("anthropic: a golden set's examples open every request inside the cached prefix; an item that is an example sees the next one", async () => {
    controls(anthropicBatches, { finishAfterPolls: 0 });
    const owner = await makeOwner(t.db);
    const golden = Array.from({ length: 4 }, (_, i) => ({ item_key: `item-${i + 1}`, input: `golden ticket ${i + 1}`, expected: `label ${i + 1}` }));
    const set = await createGoldenSet(t.db, { userId: owner.userId, name: "tickets", items: golden });
    const before = anthropic.requests.length;
    const prefix = `Label this support ticket. ${"Tickets about screens, keyboards or cables are hardware. ".repeat(90)}Ticket: `;
    const batch = await submit(owner, { key: "examples", n: 4, over: { prompt_template: `${prefix}{{item}}`, examples: { golden_set: set.id, count: 2 } } });
    spawnWorker();
    expect(await until("the batch to finish", () => batchRow(owner, batch.id), terminal)).toMatchObject({ status: "completed", succeededCount: 4 });
    const created = anthropic.requests.slice(before).filter((r) => r.path === "/v1/messages/batches");
    const reqs = (created[0]!.body as { requests: { custom_id: string; params: { messages: { role: string; content: unknown }[] } }[] }).requests;
    expect(reqs).toHaveLength(4);
    const keyOf = new Map(
      (await t.db.execute<{ id: string; item_key: string }>(sql`select id, item_key from subagent_batch_items where batch_id = ${batch.id}`)).map((r) => [r.id, r.item_key]),
    );
    // The set's keys in md5 order, computed here.
    const md5 = (k: string) => createHash("md5").update(k).digest("hex");
    const order = golden.map((g) => g.item_key).sort((a, b) => (md5(a) < md5(b) ? -1 : 1));
    const line = (k: string) => JSON.stringify({ input: golden.find((g) => g.item_key === k)!.input, answer: golden.find((g) => g.item_key === k)!.expected });
    for (const r of reqs) {
      const key = keyOf.get(r.custom_id)!;
      const blocks = r.params.messages[0]!.content as { type: string; text: string; cache_control?: unknown }[];
      const seen = order.filter((k) => k !== key).slice(0, 2);
      const text = blocks.map((b) => b.text).join("");
      for (const k of seen) expect(text).toContain(line(k));
      expect(text).not.toContain(line(key));
      expect(text.endsWith(`Ticket: thing ${Number(key.slice(5)) - 1}`)).toBe(true);
      if (order.slice(0, 2).includes(key)) continue;
      // Not an example itself: the examples and the template's prefix are one marked block.
      expect(blocks).toEqual([
        { type: "text", text: expect.stringMatching(/^Worked examples: [\s\S]*END EXAMPLES\n\nLabel this support ticket\. .*Ticket: $/), cache_control: { type: "ephemeral" } },
        { type: "text", text: expect.stringMatching(/^thing \d$/) },
      ]);
    }
  }, 150_000);

  it("openai: a JSONL file with purpose batch, then a batch on /v1/chat/completions; no live call, priced at the discount", async () => {
    controls(openaiBatches, { finishAfterPolls: 1 });
    const owner = await makeOwner(t.db);
    const before = openai.requests.length;
    const batch = await submit(owner, { key: "full-openai", n: 12, model: "gpt" });
    spawnWorker();
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "completed", succeededCount: 12 });
    const seen = openai.requests.slice(before);
    expect(seen.filter((r) => r.path === "/v1/files")).toHaveLength(1);
    const create = seen.find((r) => r.path === "/v1/batches");
    expect(create?.body).toMatchObject({ endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(seen.filter((r) => r.path.endsWith("/chat/completions"))).toHaveLength(0);
    for (const r of await items(batch.id)) expect(Math.abs(r.cost_usd - ((r.input_tokens * 3 + r.output_tokens * 15) / 1e6) * 0.5)).toBeLessThan(1e-15);
  }, 150_000);

  it("items at the provider hold no slot: a live batch on the same worker with max_running 1 runs meanwhile", async () => {
    controls(anthropicBatches, { hold: true });
    const owner = await makeOwner(t.db);
    const cfg = config();
    const pbBatch = await submit(owner, { key: "held", n: 5 });
    spawnWorker({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1" });
    await until("the provider batch", () => t.db.execute<{ state: string }>(sql`select state from provider_batches where batch_id = ${pbBatch.id}`), (r) => r[0]?.state === "in_progress");
    const { batch: live } = await submitBatch(t.db, {
      ...batchSubagent(cfg, undefined),
      ...owner,
      config: cfg,
      model: { name: "simulator", simulator: true },
      input: { submission_key: "live-beside", items: ["a", "b", "c", "d"] },
    });
    const liveDone = await until("the live batch", () => batchRow(owner, live.id), terminal);
    expect(liveDone).toMatchObject({ status: "completed", succeededCount: 4 });
    expect(await batchRow(owner, pbBatch.id)).toMatchObject({ status: "running", runningCount: 5 });
    anthropicBatches.finishNow();
    expect(await until("the provider batch to finish", () => batchRow(owner, pbBatch.id), terminal)).toMatchObject({ status: "completed", succeededCount: 5 });
  }, 150_000);

  it("pause sends no new provider batch; resume sends it", async () => {
    controls(anthropicBatches, {});
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "paused", n: 6 });
    await pauseBatch(t.db, { ...owner, batchId: batch.id });
    const created = anthropicBatches.batches.size;
    spawnWorker();
    await workersUp();
    await sleep(2000);
    expect(anthropicBatches.batches.size).toBe(created);
    const [n] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from provider_batches where batch_id = ${batch.id}`);
    expect(n!.n).toBe(0);
    expect(await batchRow(owner, batch.id)).toMatchObject({ status: "paused", queuedCount: 6 });
    await resumeBatch(t.db, { ...owner, batchId: batch.id });
    expect(await until("the batch to finish", () => batchRow(owner, batch.id), terminal)).toMatchObject({ status: "completed", succeededCount: 6 });
  }, 120_000);

  it("cancel reaches the provider's cancel and keeps what had finished", async () => {
    controls(anthropicBatches, { finishAfterPolls: 1_000, perPoll: 3 });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "cancelled", n: 20 });
    spawnWorker();
    const [pb] = await until("some requests done", () => t.db.execute<{ external_id: string; succeeded: number }>(sql`select external_id, succeeded from provider_batches where batch_id = ${batch.id}`), (r) => (r[0]?.succeeded ?? 0) >= 6);
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
    await until("the cancel at the provider", async () => anthropicBatches.cancels, (c) => c.includes(pb!.external_id));
    await until("the provider batch settled", () => t.db.execute<{ state: string }>(sql`select state from provider_batches where batch_id = ${batch.id}`), (r) => r[0]?.state === "settled");
    const fake = anthropicBatches.batches.get(pb!.external_id)!;
    const doneAtProvider = [...fake.outcomes.values()].filter((o) => o.kind === "succeeded").length;
    const rows = await items(batch.id);
    expect(doneAtProvider).toBeGreaterThanOrEqual(6);
    expect(rows.filter((r) => r.status === "succeeded")).toHaveLength(doneAtProvider);
    expect(rows.filter((r) => r.status === "cancelled")).toHaveLength(20 - doneAtProvider);
    expect(await batchRow(owner, batch.id)).toMatchObject({ status: "cancelled", succeededCount: doneAtProvider });
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 150_000);

  it("on_expiry live: expired requests run on the live lane", async () => {
    controls(openaiBatches, { hold: true });
    const owner = await makeOwner(t.db);
    const before = openai.requests.length;
    const batch = await submit(owner, { key: "expire-live", n: 4, model: "gpt" });
    spawnWorker();
    await until("the provider batch", () => t.db.execute<{ state: string }>(sql`select state from provider_batches where batch_id = ${batch.id}`), (r) => r[0]?.state === "in_progress");
    openaiBatches.expireNow();
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "completed", succeededCount: 4 });
    expect(openai.requests.slice(before).filter((r) => r.path.endsWith("/chat/completions"))).toHaveLength(4);
    // Live calls at the live price.
    for (const r of await items(batch.id)) expect(Math.abs(r.cost_usd - (r.input_tokens * 3 + r.output_tokens * 15) / 1e6)).toBeLessThan(1e-15);
  }, 150_000);

  it("on_expiry fail: expired requests fail their items", async () => {
    controls(anthropicBatches, { hold: true });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "expire-fail", n: 3 });
    spawnWorker({ FLOTILLA__PROVIDER_BATCH__ON_EXPIRY: "fail" });
    await until("the provider batch", () => t.db.execute<{ state: string }>(sql`select state from provider_batches where batch_id = ${batch.id}`), (r) => r[0]?.state === "in_progress");
    anthropicBatches.expireNow();
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "failed", failedCount: 3 });
    for (const r of await items(batch.id)) expect(r.error).toMatch(/^provider_batch_expired/);
  }, 150_000);

  it("typed results: each answer read and validated as live; one the schema refuses gets its repair turn live, at the live price", async () => {
    controls(anthropicBatches, {});
    const owner = await makeOwner(t.db);
    const schema = { type: "object", properties: { label: { type: "string" } }, required: ["label"], additionalProperties: false };
    const before = anthropic.requests.length;
    const batch = await submit(owner, { key: "typed", n: 3, over: { items: ["label=hardware", "label=software", "label=NUMBER"], output_schema: schema } });
    spawnWorker();
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "completed", succeededCount: 3 });
    const rows = await t.db.execute<{ output: unknown; attempts: number; input_tokens: number; output_tokens: number; cost_usd: number }>(
      sql`select output, attempts, input_tokens::int, output_tokens::int, cost_usd from subagent_batch_items where batch_id = ${batch.id} order by position`,
    );
    expect(rows.map((r) => r.output)).toEqual([{ label: "hardware" }, { label: "software" }, REPAIRED]);
    expect(rows.map((r) => r.attempts)).toEqual([1, 1, 1]);
    // The three requests went in one provider batch; only the repair turn was a live call.
    const seen = anthropic.requests.slice(before);
    expect(seen.filter((r) => r.path === "/v1/messages/batches")).toHaveLength(1);
    const live = seen.filter((r) => r.path === "/v1/messages");
    expect(live).toHaveLength(1);
    expect(JSON.stringify(live[0]!.body?.messages)).toContain("not valid against the required JSON Schema");
    // Answered in the batch: half price. The repaired one: its batch response at half price, the live repair turn in full.
    for (const r of rows.slice(0, 2)) expect(Math.abs(r.cost_usd - ((r.input_tokens * 3 + r.output_tokens * 15) / 1e6) * 0.5)).toBeLessThan(1e-15);
    const repair = live[0]!.usage as { input_tokens: number; output_tokens: number };
    const repairCost = (repair.input_tokens * 3 + repair.output_tokens * 15) / 1e6;
    const batchPart = ((rows[2]!.input_tokens - repair.input_tokens) * 3 + (rows[2]!.output_tokens - repair.output_tokens) * 15) / 1e6;
    expect(Math.abs(rows[2]!.cost_usd - (batchPart * 0.5 + repairCost))).toBeLessThan(1e-12);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 150_000);

  it("an errored request is retried in the next provider batch within max_attempts, and fails once they are spent", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "errored", n: 6 });
    const ids = (await items(batch.id)).map((r) => r.id);
    // The first item's request errors once, the second's every time (max_attempts 3).
    const errors = new Map<string, number>();
    controls(anthropicBatches, {
      errorIf: (customId) => {
        const n = (errors.get(customId) ?? 0) + 1;
        errors.set(customId, n);
        return customId === ids[1] || (customId === ids[0] && n === 1);
      },
    });
    spawnWorker();
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "completed", succeededCount: 5, failedCount: 1 });
    const rows = await items(batch.id);
    expect(rows.map((r) => [r.status, r.attempts])).toEqual([
      ["succeeded", 2],
      ["failed", 3],
      ["succeeded", 1],
      ["succeeded", 1],
      ["succeeded", 1],
      ["succeeded", 1],
    ]);
    expect(rows[1]!.error).toMatch(/^provider_batch_error: api_error: the fake failed this request/);
    // Each retry went out in a provider batch of its own: 6 requests, then the 2 that errored, then the 1 still erroring.
    const pbs = await t.db.execute<{ state: string; requests: number; succeeded: number; errored: number }>(
      sql`select state, requests, succeeded, errored from provider_batches where batch_id = ${batch.id} order by created_at`,
    );
    expect(pbs).toEqual([
      { state: "settled", requests: 6, succeeded: 4, errored: 2 },
      { state: "settled", requests: 2, succeeded: 1, errored: 1 },
      { state: "settled", requests: 1, succeeded: 0, errored: 1 },
    ]);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 150_000);

  it("SIGKILL of the poller mid-poll: a second worker takes the lease over and finishes; nothing lost or settled twice, never two pollers at once", async () => {
    controls(anthropicBatches, { finishAfterPolls: 6, pollDelayMs: 300 });
    anthropicBatches.maxConcurrentPolls = 0;
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "kill", n: 30 });
    const env = { FLOTILLA__PROVIDER_BATCH__LEASE_SECONDS: "2" };
    const first = spawnWorker(env);
    const [pb] = await until("a poll in flight", () => t.db.execute<{ id: string; external_id: string; lease_owner: string | null; polls: number }>(
      sql`select id, external_id, lease_owner, polls from provider_batches where batch_id = ${batch.id}`,
    ), (r) => (r[0]?.polls ?? 0) >= 2 && r[0]?.lease_owner !== null);
    first.kill("SIGKILL");
    // Two more workers compete for the lapsed lease.
    spawnWorker(env);
    spawnWorker(env);
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    expect(done).toMatchObject({ status: "completed", succeededCount: 30 });
    const [attempts] = await t.db.execute<{ succeeded: number; items: number }>(
      sql`select count(*) filter (where outcome = 'succeeded')::int as succeeded, count(distinct item_id)::int as items
            from subagent_batch_item_attempts where batch_id = ${batch.id}`,
    );
    expect(attempts).toEqual({ succeeded: 30, items: 30 });
    expect(anthropicBatches.maxConcurrentPolls).toBe(1);
    const [after] = await t.db.execute<{ state: string }>(sql`select state from provider_batches where id = ${pb!.id}`);
    expect(after!.state).toBe("settled");
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 180_000);
});

describe("a hostile or broken provider does not wedge the lane", () => {
  const resultsFetches = (before: number) => anthropic.requests.slice(before).filter((r) => r.path.endsWith("/results")).length;
  const providerBatch = (batchId: string) =>
    t.db.execute<{ state: string; last_error: string | null; succeeded: number; errored: number; expired: number; cancelled: number }>(
      sql`select state, last_error, succeeded, errored, expired, cancelled from provider_batches where batch_id = ${batchId} order by created_at`,
    );

  it("skips and counts results lines that do not parse (one of 10 MB among them): their item ends as one without a result; the file is read once", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "malformed", n: 4 });
    const ids = (await items(batch.id)).map((r) => r.id);
    controls(anthropicBatches, {
      resultLines: (lines) => [
        ...lines.map((l) => (l.includes(ids[1]!) ? `{"custom_id": "${ids[1]}", "result": {"type": "succeeded", "mess` : l)),
        "x".repeat(10 * 1024 * 1024),
        '{"custom_id": 5, "result": {"type": "succeeded"}}',
        "[]",
      ],
    });
    const before = anthropic.requests.length;
    spawnWorker({ FLOTILLA__PROVIDER_BATCH__ON_EXPIRY: "fail" });
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal, 60_000);
    expect(done).toMatchObject({ succeededCount: 3, failedCount: 1 });
    const rows = await items(batch.id);
    expect(rows[1]).toMatchObject({ status: "failed", error: expect.stringMatching(/^provider_batch_expired/) });
    const [pb] = await providerBatch(batch.id);
    expect(pb).toMatchObject({ state: "settled", last_error: expect.stringMatching(/^4 result line\(s\) could not be read/) });
    expect(resultsFetches(before)).toBe(1);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 120_000);

  it("openai: streams an output file past 512 MiB (V8's longest string) in bounded memory, with request counts of 1e30", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "huge-file", n: 3, model: "gpt" });
    const MiB = " ".repeat(1024 * 1024);
    controls(openaiBatches, {
      // The honest lines, then 600 blank lines of 1 MiB each.
      resultLines: function* (lines) {
        yield* lines;
        for (let i = 0; i < 600; i++) yield MiB;
      },
      requestCounts: () => ({ total: 1e30, completed: 1e30, failed: -7 }),
    });
    const worker = spawnWorker();
    let peak = 0;
    const memory = setInterval(() => {
      try {
        const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${worker.pid}/status`, "utf8"));
        if (hwm) peak = Math.max(peak, Number(hwm[1]) * 1024);
      } catch {}
    }, 200);
    try {
      const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal, 90_000);
      expect(done).toMatchObject({ status: "completed", succeededCount: 3 });
    } finally {
      clearInterval(memory);
    }
    // The file is never held whole (it was 600 MB): the worker's peak stays far below it.
    expect(peak).toBeGreaterThan(0);
    expect(peak, `peak ${Math.round(peak / 1024 / 1024)} MiB`).toBeLessThan(450 * 1024 * 1024);
    const [pb] = await t.db.execute<{ state: string; succeeded: number; errored: number }>(sql`select state, succeeded, errored from provider_batches where batch_id = ${batch.id}`);
    expect(pb).toEqual({ state: "settled", succeeded: 50_000, errored: 0 });
  }, 150_000);

  it("renews its lease while a slow results file arrives (a pass longer than the lease), instead of starting over for ever", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "slow-results", n: 6 });
    controls(anthropicBatches, { lineDelayMs: 700 });
    const before = anthropic.requests.length;
    spawnWorker({ FLOTILLA__PROVIDER_BATCH__LEASE_SECONDS: "1" });
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal, 60_000);
    expect(done).toMatchObject({ status: "completed", succeededCount: 6 });
    expect(resultsFetches(before)).toBe(1);
  }, 120_000);

  it("ends the items of a provider batch that never ends at its deadline (deadline_seconds), cancelling it at the provider", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "never-ends", n: 3 });
    controls(anthropicBatches, { hold: true });
    spawnWorker({ FLOTILLA__PROVIDER_BATCH__DEADLINE_SECONDS: "3", FLOTILLA__PROVIDER_BATCH__ON_EXPIRY: "fail" });
    const done = await until("the batch to finish", () => batchRow(owner, batch.id), terminal, 60_000);
    expect(done).toMatchObject({ status: "failed", failedCount: 3 });
    for (const r of await items(batch.id)) expect(r.error).toMatch(/^provider_batch_expired/);
    const [pb] = await t.db.execute<{ state: string; external_id: string; last_error: string }>(sql`select state, external_id, last_error from provider_batches where batch_id = ${batch.id}`);
    expect(pb).toMatchObject({ state: "settled", last_error: expect.stringMatching(/deadline_seconds \(3 s\)/) });
    expect(anthropicBatches.cancels).toContain(pb!.external_id);
  }, 120_000);

  it("always ends a cancelled batch's items, even when the provider fails the cancel and never ends the batch", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "cancel-refused", n: 4 });
    controls(anthropicBatches, { hold: true, cancelFails: true });
    spawnWorker();
    await until("the provider batch", () => t.db.execute<{ state: string }>(sql`select state from provider_batches where batch_id = ${batch.id}`), (r) => r[0]?.state === "in_progress");
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
    const rows = await until("the items to end", () => items(batch.id), (r) => r.every((i) => i.status === "cancelled"), 60_000);
    expect(rows).toHaveLength(4);
    const [pb] = await providerBatch(batch.id);
    expect(pb).toMatchObject({ state: "settled", last_error: expect.stringMatching(/did not end the cancelled batch/) });
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  }, 120_000);

  it("stores a provider's error text cut to a few KB, with configured keys redacted", async () => {
    const key = "sk-fake-SECRET-0123456789abcdef";
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "error-text", n: 1 });
    controls(anthropicBatches, { errorIf: () => true, errorMessage: () => `upstream said: your key ${key} is bad. ${"blah ".repeat(200_000)}` });
    spawnWorker({ FAKE_PROVIDER_KEY: key });
    await until("the batch to finish", () => batchRow(owner, batch.id), terminal, 90_000);
    const [row] = await items(batch.id);
    expect(row!.status).toBe("failed");
    expect(row!.error).toMatch(/^provider_batch_error: api_error: upstream said: your key \[redacted\] is bad/);
    expect(row!.error).not.toContain(key);
    expect(row!.error!.length).toBeLessThan(5_000);
  }, 150_000);

  it("refuses an answer whose token counts are out of range, as the live lane does: not billed, the item failed with invalid_usage", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, { key: "clamped", n: 1, over: { items: ["huge-usage"] } });
    controls(anthropicBatches, {});
    spawnWorker();
    await until("the batch to finish", () => batchRow(owner, batch.id), terminal);
    const [row] = await t.db.execute<{ status: string; stop_reason: string; error: string; result: string | null; input_tokens: string; output_tokens: string }>(
      sql`select status, stop_reason, error, result, input_tokens::text, output_tokens::text from subagent_batch_items where batch_id = ${batch.id}`,
    );
    expect(row).toMatchObject({ status: "failed", stop_reason: "invalid_usage", input_tokens: "0", output_tokens: "0" });
    expect(row!.error).toMatch(/^invalid_usage: the provider reported token counts out of range/);
    expect(row!.result ?? "").toBe("");
  }, 120_000);
});
