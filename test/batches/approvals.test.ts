import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { waitingApprovalsSchema } from "@/lib/api/approvals";
import { type BatchProjection, batchProjectionSchema, itemProjectionSchema } from "@/lib/api/batches";
import type { FlotillaConfig } from "@/lib/config";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { call, errorOf, itemIdAt, makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { counterDrift, sleep, testConfig } from "./support";

/**
 * Batch items whose tool call needs a person, on a real worker, PostgreSQL and the simulator, with
 * the decisions over the HTTP routes: waiting items hold no slot (another batch runs meanwhile on
 * the worker's one slot), approve runs the call once, deny tells the model why, "approve all"
 * decides one tool's calls in one batch, the timeout denies, a second user gets 404.
 */

const tdb = await setupApiDatabase();
let alice: TestUser;
let bob: TestUser;
let thread: string;
let bobThread: string;
let worker: BatchWorker | undefined;

beforeAll(async () => {
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
  thread = await makeThread(tdb, alice);
  bobThread = await makeThread(tdb, bob);
});
afterEach(async () => {
  await worker?.stop({ waitMs: 2_000 });
  worker = undefined;
});

function config(over: { approval_timeout_seconds?: number } = {}): FlotillaConfig {
  return testConfig({
    subagent_runtime: { max_running: 1 },
    subagent_batches: { poll_interval_seconds: 0.1, lease_seconds: 5 },
    simulator: { latency_ms: 5 },
    tools: { require_approval: ["text/count_*"], ...over },
  });
}

function startWorker(cfg: FlotillaConfig): void {
  worker = new BatchWorker({
    database: tdb,
    config: cfg,
    instanceId: `approvals-${Math.random().toString(36).slice(2, 8)}`,
    runtime: createSubagentRuntime(cfg),
    model: resolveModel(cfg, {}),
  });
  void worker.start();
}

const base = (threadId: string) => `/api/threads/${threadId}/subagent-batches`;
let keySeq = 0;

async function submit(items: string[]): Promise<BatchProjection> {
  const res = await call("POST", base(thread), { token: alice.token, json: { submission_key: `approve-${++keySeq}`, items } });
  expect(res.status, await res.clone().text()).toBe(201);
  return batchProjectionSchema.parse(await res.json());
}

async function read(batchId: string, user = alice, threadId = thread): Promise<BatchProjection> {
  const res = await call("GET", `${base(threadId)}/${batchId}`, { token: user.token });
  expect(res.status).toBe(200);
  return batchProjectionSchema.parse(await res.json());
}

async function until(batchId: string, test: (b: BatchProjection) => boolean, what: string): Promise<BatchProjection> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const b = await read(batchId);
    if (test(b)) return b;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(b.counts)} ${b.status}`);
    await sleep(50);
  }
}

const count = (text: string) => `Count it [[tool:count_text {"text":"${text}"}]]`;

async function item(batchId: string, position: number) {
  const [row] = await tdb.sql<{ status: string; result: string | null; attempts: number; run_id: string; error: string | null }[]>`
    select status, result, attempts, run_id, error from subagent_batch_items where batch_id = ${batchId} and position = ${position}`;
  return row!;
}

async function toolCallsOfItem(batchId: string, position: number): Promise<string[]> {
  // Every run of the item (the parked attempt's and the resumed one's) with the calls each ran.
  const rows = await tdb.sql<{ name: string }[]>`
    select c->>'name' as name from subagent_batch_items it
      join agent_runs r on r.id in (select a.run_id from subagent_batch_item_attempts a where a.item_id = it.id)
      cross join lateral jsonb_array_elements(coalesce(r.tool_calls, '[]')) c
     where it.batch_id = ${batchId} and it.position = ${position}`;
  return rows.map((r) => r.name);
}

describe("batch items waiting for approval", () => {
  it("park without a slot, then approve, deny and approve-all decide them; a second user gets 404", async () => {
    const cfg = config();
    startWorker(cfg);
    const a = await submit([count("one two"), count("x"), count("y z"), count("q r s")]);
    const waiting = await until(a.id, (b) => b.counts.awaiting_approval === 4, "four items waiting");
    expect(waiting.counts).toMatchObject({ awaiting_approval: 4, leased: 0, running: 0, queued: 0, succeeded: 0 });
    expect(waiting.status).not.toMatch(/completed|failed/);
    expect(await counterDrift(tdb.db, a.id)).toEqual({});
    const parked = await item(a.id, 1);
    expect(parked).toMatchObject({ status: "awaiting_approval", attempts: 0, error: "awaiting_approval: count_text waits for a person" });
    // The tool has not run: the parked run recorded no call.
    expect(await toolCallsOfItem(a.id, 1)).toEqual([]);
    // The step that asked is stored (durable steps): the next attempt continues after it.
    const [stored] = await tdb.sql<{ n: number }[]>`
      select count(*)::int as n from subagent_batch_item_steps st join subagent_batch_items it on it.id = st.item_id
       where it.batch_id = ${a.id} and it.position = 1`;
    expect(stored!.n).toBe(1);

    // The panel's list: every waiting call with its tool and arguments; 404 for another user.
    const listed = await call("GET", `${base(thread)}/${a.id}/approvals`, { token: alice.token });
    expect(listed.status).toBe(200);
    const { approvals, tools } = waitingApprovalsSchema.parse(await listed.json());
    expect(tools).toEqual([{ tool: "count_text", waiting: 4 }]);
    expect(approvals.map((x) => [x.item_key, x.tool, x.input])).toEqual([
      ["item-1", "count_text", '{"text": "one two"}'],
      ["item-2", "count_text", '{"text": "x"}'],
      ["item-3", "count_text", '{"text": "y z"}'],
      ["item-4", "count_text", '{"text": "q r s"}'],
    ]);
    expect((await call("GET", `${base(bobThread)}/${a.id}/approvals`, { token: bob.token })).status).toBe(404);

    // The worker's one slot is free: another batch runs to completion meanwhile.
    const other = await submit(["plain one", "plain two"]);
    expect((await until(other.id, (b) => b.status === "completed", "the other batch")).counts.succeeded).toBe(2);
    expect((await read(a.id)).counts.awaiting_approval).toBe(4);

    // A second user: 404 for both routes, nothing decided.
    const first = await itemIdAt(tdb, a.id, 1);
    const asBob = await call("POST", `${base(bobThread)}/${a.id}/items/${first}/approval`, { token: bob.token, json: { decision: "approve" } });
    expect(asBob.status).toBe(404);
    const asBobInHerThread = await call("POST", `${base(thread)}/${a.id}/items/${first}/approval`, { token: bob.token, json: { decision: "approve" } });
    expect(asBobInHerThread.status).toBe(404);
    const allAsBob = await call("POST", `${base(bobThread)}/${a.id}/approvals`, { token: bob.token, json: { tool: "count_text", decision: "approve", seen: 4 } });
    expect(allAsBob.status).toBe(404);
    expect((await read(a.id)).counts.awaiting_approval).toBe(4);

    // Bad input names the field and decides nothing.
    const bad = await call("POST", `${base(thread)}/${a.id}/items/${first}/approval`, { token: alice.token, json: { decision: "maybe" } });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).message).toMatch(/decision/);
    const badAll = await call("POST", `${base(thread)}/${a.id}/approvals`, { token: alice.token, json: { decision: "approve" } });
    expect(badAll.status).toBe(400);
    expect((await errorOf(badAll)).message).toMatch(/tool/);

    // Approve one.
    const approved = await call("POST", `${base(thread)}/${a.id}/items/${first}/approval`, { token: alice.token, json: { decision: "approve" } });
    expect(approved.status, await approved.clone().text()).toBe(200);
    const body = (await approved.json()) as { item: unknown; batch: unknown };
    expect(itemProjectionSchema.parse(body.item).status).not.toBe("awaiting_approval");
    expect(batchProjectionSchema.parse(body.batch).counts.awaiting_approval).toBe(3);
    // Not waiting any more: 409.
    const again = await call("POST", `${base(thread)}/${a.id}/items/${first}/approval`, { token: alice.token, json: { decision: "deny" } });
    expect(again.status).toBe(409);

    // Deny one, with a reason the model reads.
    const second = await itemIdAt(tdb, a.id, 2);
    const denied = await call("POST", `${base(thread)}/${a.id}/items/${second}/approval`, {
      token: alice.token,
      json: { decision: "deny", reason: "not today" },
    });
    expect(denied.status).toBe(200);

    // Approve all for the tool in this batch: the two left.
    const unknownTool = await call("POST", `${base(thread)}/${a.id}/approvals`, { token: alice.token, json: { tool: "fetch_url", decision: "approve", seen: 0 } });
    expect(await unknownTool.json()).toEqual({ decided: 0 });
    const all = await call("POST", `${base(thread)}/${a.id}/approvals`, { token: alice.token, json: { tool: "count_text", decision: "approve", seen: 2 } });
    expect(all.status).toBe(200);
    expect(await all.json()).toEqual({ decided: 2 });

    const done = await until(a.id, (b) => b.status === "completed", "the approved batch");
    expect(done.counts).toMatchObject({ succeeded: 4, awaiting_approval: 0, failed: 0 });
    expect(await counterDrift(tdb.db, a.id)).toEqual({});
    const one = await item(a.id, 1);
    expect(one.result).toContain('"words":2');
    expect(one.attempts).toBe(1);
    expect(await toolCallsOfItem(a.id, 1)).toEqual(["count_text"]);
    const two = await item(a.id, 2);
    expect(two.result).toContain("denied by the user: not today");
    expect(await toolCallsOfItem(a.id, 2)).toEqual([]);
    expect((await item(a.id, 3)).result).toContain('"words":2');
    expect((await item(a.id, 4)).result).toContain('"words":3');
  }, 180_000);

  it("denies a call nobody decided within tools.approval_timeout_seconds", async () => {
    startWorker(config({ approval_timeout_seconds: 1 }));
    const b = await submit([count("late")]);
    const done = await until(b.id, (x) => x.status === "completed", "the timed-out batch");
    expect(done.counts.succeeded).toBe(1);
    const only = await item(b.id, 1);
    expect(only.result).toMatch(/denied by the user: no decision within 1 s \(tools\.approval_timeout_seconds\)/);
    expect(await toolCallsOfItem(b.id, 1)).toEqual([]);
  }, 120_000);
});
