import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection } from "@/lib/api/batches";
import type { CompareSummary } from "@/lib/api/compare";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { call, errorOf, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { startFakeAnthropic } from "../helpers/fake-anthropic";
import { addAnthropicBatches } from "../helpers/fake-provider-batches";

/**
 * Variants through the HTTP routes, run by a real worker on the simulator: the same items (keys,
 * fields, expected) again with a changed template, only the failed ones, string items keeping
 * their keys; checked as a submission; then compared with the original. A provider_batch original
 * (the fake Anthropic's batch API, holding every batch) shows that a variant keeps its lane.
 */

const anthropic = await startFakeAnthropic();
addAnthropicBatches(anthropic, { hold: true });
// A sub-agent on a model with a batch API, known to the routes (read once from here) and the worker alike.
const PROVIDER_CONFIG = {
  models: [
    { name: "claude", provider: "anthropic" as const, base_url: anthropic.url, model: "claude-sonnet-4-5", api_key_env: "FAKE_PROVIDER_KEY", price_per_million_input: 3, price_per_million_output: 15 },
  ],
  subagents: { definitions: [{ name: "labeler", description: "labels", system_prompt: "Answer with one word.", tool_groups: [], model: "claude" }] },
};
process.env.FLOTILLA__MODELS = JSON.stringify(PROVIDER_CONFIG.models);
process.env.FLOTILLA__SUBAGENTS__DEFINITIONS = JSON.stringify(PROVIDER_CONFIG.subagents.definitions);
process.env.FAKE_PROVIDER_KEY = "fake-key";

let t: TestDatabase;
let worker: BatchWorker;
let owner: TestUser;
let stranger: TestUser;
let thread: string;

beforeAll(async () => {
  t = await setupApiDatabase();
  const cfg = testConfig({ ...PROVIDER_CONFIG, subagent_batches: { poll_interval_seconds: 0.1 }, simulator: { latency_ms: 1 } });
  worker = new BatchWorker({ database: t, config: cfg, instanceId: "variant-worker", runtime: createSubagentRuntime(cfg), model: resolveModel(cfg, {}) });
  void worker.start();
  owner = await makeUser(t, "owner");
  stranger = await makeUser(t, "stranger");
  thread = await makeThread(t, owner);
  await workerAlive(t);
});

afterAll(async () => {
  await worker.stop({ waitMs: 2_000 });
  await anthropic.close();
});

const base = () => `/api/threads/${thread}/subagent-batches`;

const ended = (b: BatchProjection) => b.status === "completed" || b.status === "failed";

async function settled(batchId: string, done = ended): Promise<BatchProjection> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const body = (await (await call("GET", `${base()}/${batchId}`, { token: owner.token })).json()) as BatchProjection;
    if (done(body)) return body;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`batch ${batchId} did not settle`);
}

async function post(path: string, json: unknown, token = owner.token) {
  return call("POST", path, { token, json });
}

describe("variants", () => {
  let original: string;

  beforeAll(async () => {
    // [[echo]] answers the filled template: v1 says each item's `first`, a variant can say `second`.
    const items = [
      { item_key: "up-1", first: "no", second: "yes", expected: { note: "a" } },
      { item_key: "up-2", first: "no", second: "yes" },
      { item_key: "down", first: "yes", second: "no" },
      { item_key: "steady", first: "yes", second: "yes" },
    ];
    const res = await post(base(), {
      submission_key: "v1",
      items,
      prompt_template: "[[echo]]{{first}}",
      checks: [{ name: "says_yes", type: "regex", pattern: "^yes$" }],
      max_running_items: 2,
    });
    expect(res.status).toBe(201);
    original = ((await res.json()) as { id: string }).id;
    await settled(original);
  }, 60_000);

  it("runs the same items with a changed template, improving some and regressing others", async () => {
    const res = await post(`${base()}/${original}/variant`, { submission_key: "v2", prompt_template: "[[echo]]{{second}}" });
    expect(res.status).toBe(201);
    const variant = (await res.json()) as BatchProjection;
    expect(variant.variant_of).toBe(original);
    // Named by title, and by the title of the batch it re-runs.
    expect(variant).toMatchObject({ title: "[[echo]]{{second}}", variant_of_title: "[[echo]]{{first}}" });
    const listed = (await (await call("GET", base(), { token: owner.token })).json()) as { batches: BatchProjection[] };
    expect(listed.batches.find((b) => b.id === variant.id)).toMatchObject({ title: "[[echo]]{{second}}", variant_of_title: "[[echo]]{{first}}" });
    expect(listed.batches.find((b) => b.id === original)).toMatchObject({ title: "[[echo]]{{first}}", variant_of: null, variant_of_title: null });
    // The thread's receipt tells the lead which batch it re-runs.
    const [receipt] = await t.db.execute<{ text: string }>(sql`
      select parts->0->>'text' as text from messages where thread_id = ${thread} and metadata->'submitted_batch'->>'id' = ${variant.id}`);
    expect(receipt!.text).toContain(`Batch ${variant.id} (a variant of batch ${original}):`);
    expect(variant.total).toBe(4);
    expect(variant.max_running_items).toBe(2); // as the original's
    expect(variant.checks.map((c) => c.name)).toEqual(["says_yes"]);
    await settled(variant.id);

    const [row] = await t.db.execute<{ keys: string[]; expected: unknown }>(sql`
      select array_agg(item_key order by position) as keys,
             (select expected from subagent_batch_items where batch_id = ${variant.id} and item_key = 'up-1') as expected
        from subagent_batch_items where batch_id = ${variant.id}`);
    expect(row!.keys).toEqual(["up-1", "up-2", "down", "steady"]);
    expect(row!.expected).toEqual({ note: "a" });

    const summary = (await (await call("GET", `${base()}/${original}/compare/${variant.id}`, { token: owner.token })).json()) as CompareSummary;
    expect(summary.verdicts).toEqual({ both_passed: 1, both_failed: 0, improved: 2, regressed: 1, unjudged: 0 });
    expect(summary.a.pass_rate).toBe(0.5);
    expect(summary.b.pass_rate).toBe(0.75);
    // What changed from A to B: the template alone.
    expect(summary.differences).toEqual([{ setting: "prompt_template", a: "[[echo]]{{first}}", b: "[[echo]]{{second}}" }]);

    // A replay of the same submission_key answers the same batch.
    const again = await post(`${base()}/${original}/variant`, { submission_key: "v2", prompt_template: "[[echo]]{{second}}" });
    expect(again.status).toBe(200);
    expect(((await again.json()) as { id: string }).id).toBe(variant.id);
  });

  it("covers only the failed items when asked, and string items keep their keys", async () => {
    const strings = await post(base(), { submission_key: "s1", items: ["yes", "no", "no"], prompt_template: "[[echo]]{{item}}", checks: [{ name: "y", type: "regex", pattern: "^yes$" }] });
    const s1 = ((await strings.json()) as { id: string }).id;
    await settled(s1);
    const res = await post(`${base()}/${s1}/variant`, {
      submission_key: "s2",
      prompt_template: "[[echo]]yes, {{item}}",
      checks: [{ name: "y", type: "regex", pattern: "^yes" }],
      only: { verdict: "failed" },
    });
    expect(res.status).toBe(201);
    const s2 = (await res.json()) as BatchProjection;
    expect(s2.total).toBe(2);
    await settled(s2.id);
    const summary = (await (await call("GET", `${base()}/${s1}/compare/${s2.id}`, { token: owner.token })).json()) as CompareSummary;
    expect(summary.items).toEqual({ matched: 2, only_a: 1, only_b: 0 });
    expect(summary.verdicts.improved).toBe(2);
  });

  it("checks a variant exactly as a submission and writes nothing on a refusal", async () => {
    const before = await rowCounts(t);
    const cases: [unknown, RegExp][] = [
      [{ submission_key: "bad1", prompt_template: "[[echo]]{{missing}}" }, /prompt_template/],
      [{ submission_key: "bad2", checks: [{ name: "x", type: "regex", pattern: "(" }] }, /^checks\.0\.pattern/],
      [{ submission_key: "bad3", output_schema: { type: "nope" } }, /^output_schema/],
      [{ submission_key: "bad4", model: "no-such-model" }, /^model: unknown model/],
      [{ submission_key: "bad5", only: { verdict: "passed", status: ["cancelled"] } }, /^only: matches no item/],
      [{ submission_key: "bad6", extra: 1 }, /extra/],
      [{ submission_key: "bad7", lane: "provider_batch" }, /^lane: provider_batch needs an openai or anthropic model/],
      [{ prompt_template: "x" }, /^submission_key/],
    ];
    for (const [body, message] of cases) {
      const res = await post(`${base()}/${original}/variant`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await errorOf(res)).message).toMatch(message);
    }
    expect(await rowCounts(t)).toEqual(before);
  });

  it("takes pilot and lane as a submission does, refusing them in the JSON door's words", async () => {
    const before = await rowCounts(t);
    for (const wrong of [{ pilot: 0 }, { pilot: 1.5 }, { lane: "fast" }]) {
      const door = await post(base(), { submission_key: "door", items: ["x"], ...wrong });
      const variant = await post(`${base()}/${original}/variant`, { submission_key: "bad-setting", ...wrong });
      expect([door.status, variant.status], JSON.stringify(wrong)).toEqual([400, 400]);
      const message = (await errorOf(variant)).message;
      expect(message).toMatch(/^(pilot|lane): /);
      expect(message).toBe((await errorOf(door)).message);
    }
    expect(await rowCounts(t)).toEqual(before);

    const res = await post(`${base()}/${original}/variant`, { submission_key: "pilot-1", prompt_template: "[[echo]]{{second}}", pilot: 1, lane: "live" });
    expect(res.status).toBe(201);
    const created = (await res.json()) as BatchProjection;
    expect(created).toMatchObject({ variant_of: original, pilot: 1, lane: "live", total: 4 });
    const paused = await settled(created.id, (b) => b.status === "paused" && b.counts.leased + b.counts.running === 0);
    expect(paused).toMatchObject({ pause_reason: "pilot", counts: { succeeded: 1 } });
  });

  it("keeps the original's lane unless given: the inherited provider_batch is checked against the variant's model", async () => {
    const res = await post(base(), { submission_key: "pb-1", subagent: "labeler", items: ["red", "blue"], prompt_template: "Label {{item}}", lane: "provider_batch" });
    expect(res.status, await res.clone().text()).toBe(201);
    const pb = ((await res.json()) as BatchProjection).id;

    const kept = await post(`${base()}/${pb}/variant`, { submission_key: "pb-2", prompt_template: "Name {{item}}" });
    expect(kept.status).toBe(201);
    expect(await kept.json()).toMatchObject({ variant_of: pb, lane: "provider_batch", total: 2 });
    // The simulator has no batch API: the inherited lane is refused as a submission would be, until lane: live is given.
    const refused = await post(`${base()}/${pb}/variant`, { submission_key: "pb-3", model: "simulator" });
    expect(refused.status).toBe(400);
    expect((await errorOf(refused)).message).toMatch(/^lane: provider_batch needs an openai or anthropic model; the batch's model "simulator"/);
    const live = await post(`${base()}/${pb}/variant`, { submission_key: "pb-3", model: "simulator", lane: "live" });
    expect(live.status).toBe(201);
    expect(await live.json()).toMatchObject({ variant_of: pb, lane: "live", total: 2 });
  });

  it("keeps the original's review policy and output schema unless given; null drops either", async () => {
    const schema = { type: "object", properties: { label: { type: "string" } }, required: ["label"] };
    const res = await post(base(), {
      submission_key: "rv-1",
      items: ["a", "b"],
      prompt_template: '[[json:{"label":"x"}]]{{item}}',
      output_schema: schema,
      review: { when: "sample", rate: 0.5 },
    });
    expect(res.status, await res.clone().text()).toBe(201);
    const first = ((await res.json()) as BatchProjection).id;
    const settings = async (id: string) =>
      (
        await t.db.execute<{ review_when: string | null; review_rate: number | null; schema: unknown }>(
          sql`select review_when, review_rate, execution_spec->'output_schema' as schema from subagent_batches where id = ${id}`,
        )
      )[0]!;

    const kept = (await (await post(`${base()}/${first}/variant`, { submission_key: "rv-2" })).json()) as BatchProjection;
    expect(await settings(kept.id)).toEqual({ review_when: "sample", review_rate: 0.5, schema });
    const changed = (await (await post(`${base()}/${first}/variant`, { submission_key: "rv-3", review: { when: "all" } })).json()) as BatchProjection;
    expect(await settings(changed.id)).toMatchObject({ review_when: "all", review_rate: null });
    const dropped = await post(`${base()}/${first}/variant`, { submission_key: "rv-4", review: null, output_schema: null, prompt_template: "[[echo]]{{item}}" });
    expect(dropped.status, await dropped.clone().text()).toBe(201);
    expect(await settings(((await dropped.json()) as BatchProjection).id)).toEqual({ review_when: null, review_rate: null, schema: null });
    // A policy given is checked as a submission checks it.
    const bad = await post(`${base()}/${first}/variant`, { submission_key: "rv-5", review: { when: "sample" } });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).message).toMatch(/^review\.rate: is required/);
  });

  it("is 404 for a batch of someone else", async () => {
    const theirs = await makeThread(t, stranger);
    const res = await post(`/api/threads/${theirs}/subagent-batches/${original}/variant`, { submission_key: "steal" }, stranger.token);
    expect(res.status).toBe(404);
    const res2 = await post(`${base()}/${original}/variant`, { submission_key: "steal" }, stranger.token);
    expect(res2.status).toBe(404);
  });
});
