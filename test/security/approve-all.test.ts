import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchApprovalsConflictSchema, waitingApprovalsSchema } from "@/lib/api/approvals";
import { type BatchProjection, batchProjectionSchema } from "@/lib/api/batches";
import type { FlotillaConfig } from "@/lib/config";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { testConfig } from "../batches/support";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * "Approve all" decides only what the person was shown, over real HTTP with a real worker parking
 * the calls: `seen` is required (400 naming it); when the number of waiting calls of the tool is no
 * longer `seen` (one more parked, or one was decided meanwhile) the answer is 409 with the current
 * `waiting` and nothing is decided; ten clicks at once decide each call exactly once. The panel's
 * list counts every waiting call per tool, beyond the 100 it lists.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let threadId: string;
let worker: BatchWorker | undefined;

const config: FlotillaConfig = testConfig({
  subagent_runtime: { max_running: 16 },
  subagent_batches: { poll_interval_seconds: 0.05, lease_seconds: 5, max_running_items_per_batch: 64 },
  simulator: { latency_ms: 1 },
  tools: { require_approval: ["text/count_*"] },
});

beforeAll(async () => {
  server = await startWebServer();
  alice = await makeUser(tdb, "approver");
  threadId = await makeThread(tdb, alice);
  worker = new BatchWorker({
    database: tdb,
    config,
    instanceId: "approve-all",
    runtime: createSubagentRuntime(config),
    model: resolveModel(config, {}),
  });
  void worker.start();
});

afterAll(async () => {
  await worker?.stop({ waitMs: 2_000 });
  await server.close();
});

function http(method: string, path: string, json?: unknown): Promise<Response> {
  return fetch(`${server.origin}/api/threads/${threadId}/subagent-batches${path}`, {
    method,
    headers: { authorization: `Bearer ${alice.token}`, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    body: json === undefined ? undefined : JSON.stringify(json),
  });
}

let seq = 0;
const count = (text: string, sleepMs = 0) => `${sleepMs ? `[[sleep:${sleepMs}]] ` : ""}Count it [[tool:count_text {"text":"${text}"}]]`;

async function submit(items: string[]): Promise<string> {
  const res = await http("POST", "", { submission_key: `all-${++seq}`, items, max_running_items: 16, max_live_items: 200 });
  expect(res.status, await res.clone().text()).toBe(201);
  return batchProjectionSchema.parse(await res.json()).id;
}

async function until(batchId: string, test: (b: BatchProjection) => boolean, what: string): Promise<BatchProjection> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const b = batchProjectionSchema.parse(await (await http("GET", `/${batchId}`)).json());
    if (test(b)) return b;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(b.counts)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function shown(batchId: string) {
  const res = await http("GET", `/${batchId}/approvals`);
  expect(res.status).toBe(200);
  return waitingApprovalsSchema.parse(await res.json());
}

/** The batch's approval rows by status. */
async function decisions(batchId: string): Promise<Record<string, number>> {
  const rows = await tdb.sql<{ status: string; n: number }[]>`
    select status, count(*)::int as n from tool_approvals where batch_id = ${batchId} group by status`;
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

describe("approve all takes seen", () => {
  it("is 400 naming seen without it or with anything but a whole number, and decides nothing", async () => {
    const batchId = await submit([count("a"), count("b")]);
    await until(batchId, (b) => b.counts.awaiting_approval === 2, "two waiting");
    for (const body of [
      { tool: "count_text", decision: "approve" },
      { tool: "count_text", decision: "approve", seen: -1 },
      { tool: "count_text", decision: "approve", seen: 1.5 },
      { tool: "count_text", decision: "approve", seen: "2" },
    ]) {
      const res = await http("POST", `/${batchId}/approvals`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe("validation_failed");
      expect(error.message).toMatch(/^seen: must be how many waiting calls of this tool you were shown/);
    }
    expect(await decisions(batchId)).toEqual({ pending: 2 });
  });

  it("is 409 with the current count, deciding nothing, when one more call parked after the person looked", async () => {
    // Five park at once; the sixth asks two seconds later.
    const batchId = await submit([...["a", "b", "c", "d", "e"].map((t) => count(t)), count("late", 2_000)]);
    await until(batchId, (b) => b.counts.awaiting_approval === 5, "five waiting");
    const looked = await shown(batchId);
    expect(looked.tools).toEqual([{ tool: "count_text", waiting: 5 }]);
    await until(batchId, (b) => b.counts.awaiting_approval === 6, "the sixth waiting");

    const res = await http("POST", `/${batchId}/approvals`, { tool: "count_text", decision: "approve", seen: 5 });
    expect(res.status).toBe(409);
    const conflict = batchApprovalsConflictSchema.parse(await res.json());
    expect(conflict.waiting).toBe(6);
    expect(conflict.error.message).toBe("seen: 5 waiting calls of count_text were shown, but 6 wait now; nothing was decided");
    expect(await decisions(batchId)).toEqual({ pending: 6 });
    expect((await until(batchId, () => true, "")).counts.awaiting_approval).toBe(6);

    // Shown the six, the person approves them.
    const again = await http("POST", `/${batchId}/approvals`, { tool: "count_text", decision: "approve", seen: conflict.waiting });
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ decided: 6 });
    const done = await until(batchId, (b) => b.status === "completed", "the approved batch");
    expect(done.counts.succeeded).toBe(6);
    expect(await decisions(batchId)).toEqual({ approved: 6 });
  });

  it("is 409 when a call was decided one by one meanwhile (fewer wait than were shown)", async () => {
    const batchId = await submit([count("a"), count("b"), count("c")]);
    await until(batchId, (b) => b.counts.awaiting_approval === 3, "three waiting");
    const { approvals, tools } = await shown(batchId);
    expect(tools).toEqual([{ tool: "count_text", waiting: 3 }]);
    const one = await http("POST", `/${batchId}/items/${approvals[0]!.item_id}/approval`, { decision: "deny", reason: "no" });
    expect(one.status).toBe(200);
    const res = await http("POST", `/${batchId}/approvals`, { tool: "count_text", decision: "approve", seen: 3 });
    expect(res.status).toBe(409);
    expect(batchApprovalsConflictSchema.parse(await res.json()).waiting).toBe(2);
    expect(await decisions(batchId)).toEqual({ denied: 1, pending: 2 });
  });

  it("ten clicks at once with the same seen: one decides every call, exactly once; the others are 409 { waiting: 0 }", async () => {
    const batchId = await submit(Array.from({ length: 8 }, (_, i) => count(`w${i}`)));
    await until(batchId, (b) => b.counts.awaiting_approval === 8, "eight waiting");
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => http("POST", `/${batchId}/approvals`, { tool: "count_text", decision: "approve", seen: 8 })),
    );
    const bodies = await Promise.all(answers.map(async (r) => ({ status: r.status, body: await r.json() })));
    const won = bodies.filter((b) => b.status === 200);
    expect(won).toEqual([{ status: 200, body: { decided: 8 } }]);
    for (const lost of bodies.filter((b) => b.status !== 200)) {
      expect(lost.status).toBe(409);
      expect(batchApprovalsConflictSchema.parse(lost.body).waiting).toBe(0);
    }
    const done = await until(batchId, (b) => b.status === "completed", "the approved batch");
    expect(done.counts.succeeded).toBe(8);
    // Each call approved once, and each item ran its tool once.
    expect(await decisions(batchId)).toEqual({ approved: 8 });
    const [runs] = await tdb.sql<{ calls: number }[]>`
      select count(*)::int as calls from subagent_batch_items it
        join subagent_batch_item_attempts a on a.item_id = it.id
        join agent_runs r on r.id = a.run_id
        cross join lateral jsonb_array_elements(coalesce(r.tool_calls, '[]')) c
       where it.batch_id = ${batchId} and c->>'name' = 'count_text'`;
    expect(runs!.calls).toBe(8);
  });

  it("counts every waiting call per tool beyond the 100 listed, and approves them all with that count", async () => {
    const batchId = await submit(Array.from({ length: 105 }, (_, i) => count(`n${i}`)));
    await until(batchId, (b) => b.counts.awaiting_approval === 105, "105 waiting");
    const { approvals, tools } = await shown(batchId);
    expect(approvals).toHaveLength(100);
    expect(tools).toEqual([{ tool: "count_text", waiting: 105 }]);
    // The 100 listed are not what is waiting: refused.
    expect((await http("POST", `/${batchId}/approvals`, { tool: "count_text", decision: "approve", seen: 100 })).status).toBe(409);
    const all = await http("POST", `/${batchId}/approvals`, { tool: "count_text", decision: "approve", seen: 105 });
    expect(await all.json()).toEqual({ decided: 105 });
  }, 120_000);
});
