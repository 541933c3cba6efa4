import type { ChildProcess } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection } from "@/lib/api/batches";
import type { GoldenSetCreated } from "@/lib/api/golden-sets";
import { call, makeThread, setupApiDatabase, type TestUser } from "../api/helpers";
import { spawnWorker, stopWorker } from "../compat/support";
import { type LeadChat, startLeadChat } from "../helpers/lead-chat";
import type { WebServer } from "../helpers/web-server";
import { waitUntil } from "../loop/support";

/**
 * The lead runs a batch against a golden set (batch_task { golden_set }) through the real chat
 * route, the simulator calling what a message spells out, a real worker process running the
 * items; batch_status then reports the check "golden"'s pass rate, so the lead can say how the
 * run did against the set. Another user's set reads as an unknown one, and nothing is written.
 */

process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "5";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const t = await setupApiDatabase();
let server: WebServer;
let worker: ChildProcess | undefined;
let alice: TestUser;
let bob: TestUser;
let chat: LeadChat;
let thread: string;

const base = () => `/api/threads/${thread}/subagent-batches`;

async function goldenSet(user: TestUser, items: unknown[]): Promise<string> {
  const res = await call("POST", "/api/golden-sets", { token: user.token, json: { name: "lead", items } });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as GoldenSetCreated).id;
}

async function toolResult(tool: string, input: Record<string, unknown>): Promise<Record<string, unknown>> {
  await chat.say(thread, `[[tool:${tool} ${JSON.stringify(input)}]]`);
  const part = (await chat.toolParts(thread, tool)).at(-1)!;
  expect(part.state).toBe("output-available");
  await chat.idle(thread);
  return part.output!;
}

const batchCount = async () => (await t.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`)[0]!.n;

beforeAll(async () => {
  ({ server, alice, bob, chat } = await startLeadChat(t, ["/api/golden-sets"]));
  worker = spawnWorker(t);
  await waitUntil("the worker's heartbeat", async () => ((await t.sql`select 1 from worker_heartbeats`).length > 0 ? true : undefined));
  thread = await makeThread(t, alice);
}, 120_000);

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

describe("batch_task with golden_set, and batch_status's golden pass rate", () => {
  it("runs the set's items and reports how many answers agree with the set", async () => {
    const set = await goldenSet(alice, [
      { item_key: "a", input: "[[echo]]yes", expected: "yes" },
      { item_key: "b", input: "[[echo]]no", expected: "yes" },
      { item_key: "c", input: "[[echo]]1", expected: "1" },
    ]);
    const output = await toolResult("batch_task", { golden_set: { id: set } });
    expect(output).toMatchObject({ created: true, total: 3, golden: { golden_set: { id: set, version: 1 }, passed: 0, failed: 0, pass_rate: null } });
    const batchId = output.batch_id as string;
    await waitUntil(`batch ${batchId} to settle`, async () => {
      const b = (await (await call("GET", `${base()}/${batchId}`, { token: alice.token })).json()) as BatchProjection;
      return b.status === "completed" ? b : undefined;
    });
    const status = await toolResult("batch_status", { batch_id: batchId });
    expect((status.batches as Record<string, unknown>[])[0]).toMatchObject({
      batch_id: batchId,
      verdicts: { passed: 2, failed: 1 },
      golden: { golden_set: { id: set, version: 1 }, passed: 2, failed: 1, pass_rate: 0.667 },
    });
  }, 120_000);

  it("refuses another user's set as an unknown one, and items beside golden_set, creating nothing", async () => {
    const before = await batchCount();
    const bobs = await goldenSet(bob, [{ item_key: "x", input: "[[echo]]x", expected: "x" }]);
    expect(await toolResult("batch_task", { golden_set: { id: bobs } })).toMatchObject({ error: expect.stringContaining("golden_set.id: no such golden set") });
    expect(await toolResult("batch_task", { golden_set: { id: bobs }, items: ["x"] })).toMatchObject({
      error: "Pass exactly one of items, files (a glob) and golden_set.",
    });
    expect(await batchCount()).toBe(before);
  }, 120_000);
});
