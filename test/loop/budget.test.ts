import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import * as chat from "@/app/api/threads/[threadId]/chat/route";
import { submitBatch } from "@/server/batches/submit";
import { buildRequest, errorOf, makeThread, makeUser, ORIGIN, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { SIM_MODEL, sleep, testConfig } from "../batches/support";
import { call, getProjection, waitUntil, Workers } from "./support";

/**
 * Budgets with a real worker process: the batch pauses in the settle that reaches its budget,
 * in-flight items finish (overshoot below max_running_items × the largest item), nothing new
 * starts; a budget below what ran is a 400, resume is refused until the budget is raised.
 * The daily quota pauses the same way and refuses chat turns with 429.
 */

// High enough for the budget suite's own user, reached by the quota test's user.
const QUOTA = 20_000;
process.env.FLOTILLA__QUOTAS__MAX_TOKENS_PER_DAY = String(QUOTA);

let t: TestDatabase;
const workers = new Workers();
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  user = await makeUser(t, "budget");
  threadId = await makeThread(t, user);
  workers.spawn({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" });
  await workers.waitAlive(1);
});

const base = () => `/api/threads/${threadId}/subagent-batches`;

async function maxItemTokens(batchId: string): Promise<number> {
  const [row] = await t.db.execute<{ n: number }>(sql`
    select coalesce(max(input_tokens + output_tokens), 0)::int as n from subagent_batch_items where batch_id = ${batchId}`);
  return row!.n;
}

describe("per-batch budgets", () => {
  it("pauses at max_total_tokens with a bounded overshoot; bad budgets are 400; raise, then resume finishes", async () => {
    const config = testConfig();
    // One item first, to learn what an item of this shape costs in simulator tokens.
    const probe = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      userId: user.userId,
      threadId,
      input: { submission_key: "probe", items: ["budget item 0 [[sleep:50]]"] },
      config,
      model: SIM_MODEL,
    });
    await waitUntil("probe done", async () => ((await getProjection(user.token, threadId, probe.batch.id)).status === "completed" ? true : undefined));
    const perItem = await maxItemTokens(probe.batch.id);
    expect(perItem).toBeGreaterThan(0);
    expect(perItem * 60).toBeLessThan(QUOTA); // this user stays under the daily quota

    const budget = Math.floor(perItem * 4.5);
    const maxRunning = 3;
    const res = await call("POST", base(), {
      token: user.token,
      json: {
        submission_key: "budgeted",
        items: Array.from({ length: 40 }, (_, i) => `budget item ${i + 1} [[sleep:300]]`),
        max_running_items: maxRunning,
        max_total_tokens: budget,
      },
    });
    expect(res.status).toBe(201);
    const created = (await res.json()) as { id: string; budget: { max_total_tokens: number } };
    expect(created.budget.max_total_tokens).toBe(budget);
    const batchId = created.id;

    const paused = await waitUntil(
      "budget pause with nothing in flight",
      async () => {
        const p = await getProjection(user.token, threadId, batchId);
        return p.status === "paused" && p.counts.leased + p.counts.running === 0 ? p : undefined;
      },
      60_000,
    );
    expect(paused.pause_reason).toBe("budget");
    expect(paused.waiting_reason).toBe("budget");
    expect(paused.eta).toBeNull();
    const used = paused.budget.used_tokens;
    expect(used).toBe(paused.usage.input_tokens + paused.usage.output_tokens);
    expect(used).toBeGreaterThanOrEqual(budget);
    // The settle that crossed the budget plus the other in-flight items: at most max_running_items of them.
    const largest = await maxItemTokens(batchId);
    expect(used - budget).toBeLessThan(maxRunning * largest);
    expect(paused.terminal).toBeLessThan(40);
    expect(paused.terminal).toBeGreaterThanOrEqual(4);

    // Nothing new starts while paused at the budget.
    await sleep(1_500);
    const still = await getProjection(user.token, threadId, batchId);
    expect(still.terminal).toBe(paused.terminal);
    expect(still.status).toBe("paused");

    const refused = await call("POST", `${base()}/${batchId}/resume`, { token: user.token });
    expect(refused.status).toBe(409);
    expect((await errorOf(refused)).message).toMatch(/budget.*raise it with POST \.\.\.\/budget/);

    const below = await call("POST", `${base()}/${batchId}/budget`, { token: user.token, json: { max_total_tokens: used - 1 } });
    expect(below.status).toBe(400);
    const belowError = await errorOf(below);
    expect(belowError.message).toContain("max_total_tokens");
    expect(belowError.message).toContain(String(used));
    for (const bad of [{ max_total_tokens: -5 }, { max_total_tokens: "lots" }, { max_cost_usd: -1 }, { max_total_tokens: 1.5 }, {}, { other: 1 }]) {
      const r = await call("POST", `${base()}/${batchId}/budget`, { token: user.token, json: bad });
      expect(r.status, JSON.stringify(bad)).toBe(400);
      const e = await errorOf(r);
      if ("max_total_tokens" in bad) expect(e.message).toMatch(/^max_total_tokens: /);
      if ("max_cost_usd" in bad) expect(e.message).toMatch(/^max_cost_usd: /);
    }
    // Nothing was written by the refusals.
    expect((await getProjection(user.token, threadId, batchId)).budget.max_total_tokens).toBe(budget);
    // Another user's batch is not found.
    const stranger = await makeUser(t, "stranger");
    const foreign = await call("POST", `${base()}/${batchId}/budget`, { token: stranger.token, json: { max_total_tokens: 1e9 } });
    expect(foreign.status).toBe(404);

    const raised = await call("POST", `${base()}/${batchId}/budget`, { token: user.token, json: { max_total_tokens: 10_000_000 } });
    expect(raised.status).toBe(200);
    const afterRaise = (await raised.json()) as { status: string; budget: { max_total_tokens: number } };
    expect(afterRaise).toMatchObject({ status: "paused", budget: { max_total_tokens: 10_000_000 } });

    const resumed = await call("POST", `${base()}/${batchId}/resume`, { token: user.token });
    expect(resumed.status).toBe(200);
    const done = await waitUntil(
      "budgeted batch completes after the raise",
      async () => {
        const p = await getProjection(user.token, threadId, batchId);
        return p.status === "completed" ? p : undefined;
      },
      90_000,
    );
    expect(done.counts.succeeded).toBe(40);
    expect(done.pause_reason).toBeNull();
  }, 180_000);

  it("a submission with a non-numeric or negative budget is a 400 naming the field, and nothing is written", async () => {
    for (const [field, value] of [
      ["max_total_tokens", -1],
      ["max_total_tokens", "10"],
      ["max_cost_usd", 0],
      ["max_cost_usd", "1.5"],
    ] as const) {
      const r = await call("POST", base(), { token: user.token, json: { submission_key: `bad-${field}-${value}`, items: ["x"], [field]: value } });
      expect(r.status).toBe(400);
      expect((await errorOf(r)).message).toMatch(new RegExp(`^${field}: `));
    }
    const ndjson = await call("POST", `${base()}?submission_key=nd-bad&max_cost_usd=abc`, {
      token: user.token,
      body: '"a"\n',
      contentType: "application/x-ndjson",
    });
    expect(ndjson.status).toBe(400);
    expect((await errorOf(ndjson)).message).toMatch(/^max_cost_usd: /);
    const [row] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from subagent_batches where submission_key like 'bad-%' or submission_key = 'nd-bad'`);
    expect(row!.n).toBe(0);
    const ok = await call("POST", `${base()}?submission_key=nd-ok&max_cost_usd=2.5&max_total_tokens=900`, {
      token: user.token,
      body: '"a [[sleep:10]]"\n',
      contentType: "application/x-ndjson",
    });
    expect(ok.status).toBe(201);
    expect(((await ok.json()) as { budget: unknown }).budget).toEqual({
      max_total_tokens: 900,
      max_cost_usd: 2.5,
      used_tokens: 0,
      used_cost_usd: 0,
    });
  });
});

describe("daily token quota", () => {
  it("pauses the user's batch with pause_reason quota and refuses new chat turns with 429 quota_exceeded", async () => {
    const quotaUser = await makeUser(t, "quota");
    const quotaThread = await makeThread(t, quotaUser);
    const config = testConfig({ quotas: { max_tokens_per_day: QUOTA } });
    const { batch } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      userId: quotaUser.userId,
      threadId: quotaThread,
      input: { submission_key: "quota", items: Array.from({ length: 400 }, (_, i) => `quota item ${i} [[sleep:50]]`), max_running_items: 4 },
      config,
      model: SIM_MODEL,
    });
    const paused = await waitUntil(
      "quota pause",
      async () => {
        const p = await getProjection(quotaUser.token, quotaThread, batch.id);
        return p.status === "paused" && p.counts.leased + p.counts.running === 0 ? p : undefined;
      },
      60_000,
    );
    expect(paused.pause_reason).toBe("quota");
    expect(paused.waiting_reason).toBe("budget");
    expect(paused.terminal).toBeLessThan(400);
    const [today] = await t.db.execute<{ tokens: number }>(
      sql`select tokens::int from user_daily_tokens where user_id = ${quotaUser.userId}`,
    );
    expect(today!.tokens).toBeGreaterThanOrEqual(QUOTA);

    const refused = await call("POST", `/api/threads/${quotaThread}/subagent-batches/${batch.id}/resume`, { token: quotaUser.token });
    expect(refused.status).toBe(409);
    expect((await errorOf(refused)).message).toMatch(/daily token quota/);

    const turn = await chat.POST(
      buildRequest("POST", new URL(`/api/threads/${quotaThread}/chat`, ORIGIN), {
        token: quotaUser.token,
        json: { message: { id: "m1", role: "user", parts: [{ type: "text", text: "hello" }] } },
      }),
      { params: Promise.resolve({ threadId: quotaThread }) },
    );
    expect(turn.status).toBe(429);
    const error = await errorOf(turn);
    expect(error.code).toBe("quota_exceeded");
    expect(error.message).toMatch(/daily token quota reached: \d+ of 20000 tokens/);
    const [stored] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from messages where thread_id = ${quotaThread}`);
    expect(stored!.n).toBe(0);
  }, 90_000);
});
