import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection } from "@/lib/api/batches";
import type { CompareSummary } from "@/lib/api/compare";
import { call, errorOf, makeThread, setupApiDatabase, type TestUser } from "../api/helpers";
import { spawnWorker, stopWorker } from "../compat/support";
import { type LeadChat, startLeadChat } from "../helpers/lead-chat";
import type { WebServer } from "../helpers/web-server";
import { waitUntil } from "../loop/support";

/**
 * The lead's judging tools through the real chat route over a socket, the simulator calling what
 * a message spells out ([[tool:NAME {json}]]), a real worker process running the items:
 * batch_task with variant_of makes a variant through the variant endpoint's own plan (its
 * estimate card first, as any batch_task over subagent_batches.confirm_over_usd, 0 here), its
 * refusals in that endpoint's words; compare_batches answers what GET .../compare answers, plus
 * the regressed items. Another user's batch is not found to either tool, and nothing is written.
 */

process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "5";
process.env.FLOTILLA__SUBAGENT_BATCHES__CONFIRM_OVER_USD = "0";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const t = await setupApiDatabase();
let server: WebServer;
let worker: ChildProcess | undefined;
let alice: TestUser;
let bob: TestUser;
let chat: LeadChat;
let thread: string;
let original: string;

const base = (threadId = thread) => `/api/threads/${threadId}/subagent-batches`;

async function settled(batchId: string, user = alice, threadId = thread): Promise<BatchProjection> {
  return waitUntil(`batch ${batchId} to settle`, async () => {
    const batch = (await (await call("GET", `${base(threadId)}/${batchId}`, { token: user.token })).json()) as BatchProjection;
    return batch.status === "completed" || batch.status === "failed" ? batch : undefined;
  });
}

async function submit(json: Record<string, unknown>, user = alice, threadId = thread): Promise<string> {
  const res = await call("POST", base(threadId), { token: user.token, json });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

const batchCount = async () => (await t.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`)[0]!.n;

/** Asks the lead to call one tool and answers its result (the last call of that tool in the thread). */
async function toolResult(tool: string, input: Record<string, unknown>, threadId = thread): Promise<Record<string, unknown>> {
  await chat.say(threadId, `[[tool:${tool} ${JSON.stringify(input)}]]`);
  const part = (await chat.toolParts(threadId, tool)).at(-1)!;
  expect(part.state).toBe("output-available");
  return part.output!;
}

beforeAll(async () => {
  ({ server, alice, bob, chat } = await startLeadChat(t, ["/api/threads/[threadId]/subagent-batches/[batchId]/compare/[otherId]"]));
  worker = spawnWorker(t);
  // batch_task is offered only while a worker is alive.
  await waitUntil("the worker's heartbeat", async () => ((await t.sql`select 1 from worker_heartbeats`).length > 0 ? true : undefined));
  thread = await makeThread(t, alice);
  // [[echo]] answers the filled template: the original says each item's `first`, a variant can say `second`.
  original = await submit({
    submission_key: "original",
    items: [
      { item_key: "up-1", first: "no", second: "yes" },
      { item_key: "up-2", first: "no", second: "yes", expected: { note: "kept" } },
      { item_key: "down", first: "yes", second: "no" },
      { item_key: "steady", first: "yes", second: "yes" },
    ],
    prompt_template: "[[echo]]{{first}}",
    checks: [{ name: "says_yes", type: "regex", pattern: "^yes$" }],
  });
  await settled(original);
}, 120_000);

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

describe("batch_task with variant_of, and compare_batches", () => {
  let variant: string;

  it("makes a variant over the same item keys with the overrides, after the estimate card", async () => {
    const before = await batchCount();
    const overrides = { prompt_template: "[[echo]]{{second}}", subagent: "researcher", max_running_items: 1, pilot: 3, lane: "live" };
    await chat.say(thread, `[[tool:batch_task ${JSON.stringify({ variant_of: original, ...overrides })}]]`);
    // The variant waits on the person like any batch_task over the threshold: its estimate, nothing created.
    const [card, ...others] = await chat.waiting(thread);
    expect(others).toEqual([]);
    expect(card).toMatchObject({ kind: "lead", tool: "batch_task", estimate: { items: 4 } });
    expect(await batchCount()).toBe(before);

    expect((await chat.decide(thread, card!.id, { decision: "approve" })).status).toBe(200);
    const output = await waitUntil("the tool result", async () => (await chat.toolParts(thread, "batch_task")).at(-1)!.output);
    await chat.idle(thread);
    expect(output).toMatchObject({ variant_of: original, created: true, total: 4, max_running_items: 1, pilot: 3 });
    variant = output.batch_id as string;
    expect(await batchCount()).toBe(before + 1);

    const res = await call("GET", `${base()}/${variant}`, { token: alice.token });
    expect(await res.json()).toMatchObject({ variant_of: original, subagent: "researcher", max_running_items: 1, pilot: 3, lane: "live" });
    const rows = await t.sql<{ item_key: string; prompt: string; expected: unknown }[]>`
      select item_key, prompt, expected from subagent_batch_items where batch_id = ${variant} order by position`;
    expect(rows.map((r) => r.item_key)).toEqual(["up-1", "up-2", "down", "steady"]);
    expect(rows.map((r) => r.prompt)).toEqual(["[[echo]]yes", "[[echo]]yes", "[[echo]]no", "[[echo]]yes"]);
    expect(rows[1]!.expected).toEqual({ note: "kept" });

    // The pilot pauses it after three items; the person resumes the rest.
    await waitUntil("the pilot pause", async () => {
      const b = (await (await call("GET", `${base()}/${variant}`, { token: alice.token })).json()) as BatchProjection;
      return b.pause_reason === "pilot" && b.counts.running + b.counts.leased === 0 ? b : undefined;
    });
    expect((await call("POST", `${base()}/${variant}/resume`, { token: alice.token })).status).toBe(200);
    await settled(variant);
  }, 120_000);

  it("compare_batches answers the compare route's counts, and the regressed items with why", async () => {
    const res = await call("GET", `${base()}/${original}/compare/${variant}`, { token: alice.token });
    expect(res.status).toBe(200);
    const summary = (await res.json()) as CompareSummary;
    expect(summary.verdicts).toEqual({ both_passed: 1, both_failed: 0, improved: 2, regressed: 1, unjudged: 0 });

    const output = await toolResult("compare_batches", { a: original, b: variant });
    const { regressed_items, regressed_not_shown, ...rest } = output;
    expect(rest).toEqual(summary);
    expect(regressed_not_shown).toBe(0);
    expect(regressed_items).toEqual([
      {
        item_key: "down",
        input: expect.stringContaining('"first":"yes"'),
        a: { status: "succeeded", verdict: "passed", output: "yes", failed_checks: [] },
        b: { status: "succeeded", verdict: "failed", output: "no", failed_checks: [{ name: "says_yes", reason: expect.any(String) }] },
      },
    ]);
  }, 60_000);

  it("refuses a bad override in the variant endpoint's words, naming the field, and creates nothing", async () => {
    const before = await batchCount();
    const wrong: Record<string, unknown>[] = [
      { checks: [{ name: "x", type: "regex", pattern: "(" }] },
      { prompt_template: "[[echo]]{{missing}}" },
      { pilot: 0 },
      { lane: "provider_batch" },
      { model: "no-such-model" },
      { max_cost_usd: 1 },
    ];
    for (const override of wrong) {
      const door = await call("POST", `${base()}/${original}/variant`, { token: alice.token, json: { submission_key: "door", ...override } });
      expect(door.status, JSON.stringify(override)).toBe(400);
      const output = await toolResult("batch_task", { variant_of: original, ...override });
      expect(output).toEqual({ error: (await errorOf(door)).message });
    }
    expect(await toolResult("batch_task", { variant_of: original, items: ["x"] })).toEqual({
      error: "variant_of: a variant runs that batch's items again; pass no items or files.",
    });
    expect(await chat.waiting(thread)).toEqual([]);
    expect(await batchCount()).toBe(before);
  }, 120_000);

  it("another user's batch is not found to either tool, and nothing of it is read or written", async () => {
    const theirThread = await makeThread(t, bob);
    const theirs = await submit({ submission_key: "bob", items: ["bob's secret answer"], prompt_template: "[[echo]]{{item}}" }, bob, theirThread);
    await settled(theirs, bob, theirThread);
    const before = await batchCount();

    expect(await toolResult("batch_task", { variant_of: theirs, prompt_template: "[[echo]]{{item}}!" })).toEqual({ error: "batch not found" });
    for (const pair of [{ a: original, b: theirs }, { a: theirs, b: original }, { a: "not-an-id", b: original }])
      expect(await toolResult("compare_batches", pair)).toEqual({ error: "batch not found" });
    const replies = JSON.stringify(await chat.toolParts(thread, "compare_batches"));
    expect(replies).not.toContain("secret");
    expect(await chat.waiting(thread)).toEqual([]);
    expect(await batchCount()).toBe(before);
  }, 120_000);
});

describe("batch_task with examples", () => {
  /** Runs one batch_task call through its estimate card and answers its tool result. */
  async function approvedBatchTask(input: Record<string, unknown>): Promise<Record<string, unknown>> {
    const calls = (await chat.toolParts(thread, "batch_task")).length;
    await chat.say(thread, `[[tool:batch_task ${JSON.stringify(input)}]]`);
    const [card] = await chat.waiting(thread);
    expect(card).toMatchObject({ kind: "lead", tool: "batch_task" });
    expect((await chat.decide(thread, card!.id, { decision: "approve" })).status).toBe(200);
    const output = await waitUntil("the tool result", async () => {
      const parts = await chat.toolParts(thread, "batch_task");
      return parts.length > calls ? parts.at(-1)!.output : undefined;
    });
    await chat.idle(thread);
    return output!;
  }
  const results = async (batchId: string) =>
    (await t.sql<{ result: string }[]>`select result from subagent_batch_items where batch_id = ${batchId} order by position`).map((r) => r.result);

  it("puts a golden set's items before each prompt; a variant drops them with null; a bad count is refused naming the field", async () => {
    const created = await call("POST", "/api/golden-sets", {
      token: alice.token,
      json: {
        name: "lead's set",
        items: [
          { item_key: "gA", input: "golden question A", expected: "golden answer A" },
          { item_key: "gB", input: "golden question B", expected: "golden answer B" },
        ],
      },
    });
    expect(created.status).toBe(201);
    const setId = ((await created.json()) as { id: string }).id;

    // [[echo]] answers the whole message: the examples, then the filled template.
    const first = await approvedBatchTask({
      items: [{ item_key: "k1", first: "hello" }],
      prompt_template: "[[echo]]{{first}}",
      examples: { golden_set: setId, count: 2 },
    });
    expect(first).toMatchObject({ created: true, total: 1 });
    const withExamples = first.batch_id as string;
    await settled(withExamples);
    const [answer] = await results(withExamples);
    expect(answer).toContain('{"input":"golden question A","answer":"golden answer A"}');
    expect(answer).toContain('{"input":"golden question B","answer":"golden answer B"}');
    expect(answer!.trimEnd().endsWith("hello")).toBe(true);

    const dropped = await approvedBatchTask({ variant_of: withExamples, examples: null });
    expect(dropped).toMatchObject({ variant_of: withExamples, created: true });
    await settled(dropped.batch_id as string);
    expect(await results(dropped.batch_id as string)).toEqual(["hello"]);

    const before = await batchCount();
    expect(await toolResult("batch_task", { items: ["x"], prompt_template: "[[echo]]{{item}}", examples: { golden_set: setId, count: 3 } })).toEqual({
      error: "examples.count: version 1 of this set holds 2 items; ask for at most 2",
    });
    expect(await chat.waiting(thread)).toEqual([]);
    expect(await batchCount()).toBe(before);
  }, 180_000);
});
