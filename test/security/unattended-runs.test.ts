import { randomUUID } from "node:crypto";
import { sql } from "drizzle-orm";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CHILD_WAKEUP_PER_USER_LIMIT } from "@/server/chat/children-wakeup";
import { replyIdFor } from "@/server/chat/lead-run";
import { startSettlementRunner, wakeupMessageId } from "@/server/chat/wakeup";
import { getConfig } from "@/server/config/load";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { type FakeHandler, type RecordedRequest, startFakeOpenAI } from "../helpers/fake-openai";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { waitUntil, Workers } from "../loop/support";

/**
 * Lead runs nobody typed (DESIGN "Holding under abuse (third round)"): a queued message's turn,
 * a settled batch's wake-up and a settled background call's wake-up meet the daily token quota
 * before any model call, and wake-ups meet chat.max_system_turns, so a child's result cannot
 * keep the lead going without a person. Background wake-ups are claimed at most two per user.
 * Real HTTP (the front door before the route handlers), real PostgreSQL, the web process's
 * settlement runner, and a local OpenAI-compatible server as the model provider: every model
 * call is one recorded request, so "no model call" is counted, not assumed.
 */

const SLOW_WAKEUP_MS = 3_000;
/** Threads whose wake-ups answer by starting another background task (a loop, unless capped). */
const chaining = new Set<string>();
/**
 * Markers whose wake-ups take SLOW_WAKEUP_MS, and per marker how many of those run at once (per
 * marker: a test's count must not carry over the calls of the test before it).
 */
const slow = { markers: new Set<string>(), inFlight: new Map<string, number>(), maxInFlight: new Map<string, number>() };

const NOTICE = "[Automatic notice";
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  return Array.isArray(content) ? content.map((p) => (p && typeof p === "object" && "text" in p ? String(p.text) : "")).join("\n") : "";
}
const lastText = (r: RecordedRequest) => textOf(r.body?.messages?.at(-1)?.content);

const handler: FakeHandler = async (req) => {
  const last = req.body?.messages?.at(-1);
  const said = lastText(req);
  if (last?.role === "tool") return { type: "text", text: "Started; it runs in the background." };
  if (said.includes(NOTICE)) {
    if ([...chaining].some((m) => req.rawBody.includes(m)))
      return { type: "tool_calls", calls: [{ name: "task", arguments: { description: "one more link", prompt: "child work", background: true } }] };
    const marker = [...slow.markers].find((m) => req.rawBody.includes(m));
    if (marker) {
      const now = (slow.inFlight.get(marker) ?? 0) + 1;
      slow.inFlight.set(marker, now);
      slow.maxInFlight.set(marker, Math.max(slow.maxInFlight.get(marker) ?? 0, now));
      await new Promise((r) => setTimeout(r, SLOW_WAKEUP_MS));
      slow.inFlight.set(marker, (slow.inFlight.get(marker) ?? 1) - 1);
    }
    return { type: "text", text: "Summary: the background work is done." };
  }
  if (said.includes("[[bg]]"))
    return { type: "tool_calls", calls: [{ name: "task", arguments: { description: "background work", prompt: "child work", background: true } }] };
  if (said.includes("[[batch]]"))
    return { type: "tool_calls", calls: [{ name: "batch_task", arguments: { prompt_template: "say {{item}}", items: ["x"] } }] };
  // About three seconds: long enough to queue behind.
  if (said.includes("[[slow]]")) return { type: "text", text: "word ".repeat(40).trim(), chunkDelayMs: 75 };
  return { type: "text", text: `Echo: ${said}` };
};

const fake = await startFakeOpenAI({ handler });
process.env.MODEL_BASE_URL = fake.url;
process.env.MODEL_API_KEY = "sk-unattended";
process.env.MODEL_NAME = "fake-lead";
const t = await setupApiDatabase();
const workers = new Workers().use(t);
let server: WebServer;
let stopRunner: (() => Promise<void>) | undefined;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/chat"] });
});
afterEach(async () => {
  await stopRunner?.();
  stopRunner = undefined;
  await workers.stopAll();
  const config = getConfig();
  config.quotas.max_tokens_per_day = 0;
  config.chat.max_system_turns = 10;
  chaining.clear();
  slow.markers.clear();
});
afterAll(async () => {
  await server?.close();
  await fake.close();
});

/** The web process's settlement runner (wake-ups of batches and background calls), in this process as in `next start`. */
function runSettlements() {
  stopRunner = startSettlementRunner({ db: t.db, config: getConfig(), owner: `web-${randomUUID()}`, intervalMs: 50, backoffBaseMs: 200 });
}

let seq = 0;
async function post(user: TestUser, threadId: string, text: string) {
  const message = { id: `u${Date.now().toString(36)}x${++seq}`, role: "user", parts: [{ type: "text", text }] };
  const res = await fetch(`${server.origin}/api/threads/${threadId}/chat`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
  return { message, res };
}

type Row = { id: string; role: string; text: string; metadata: Record<string, unknown> | null };
async function messagesOf(threadId: string): Promise<Row[]> {
  return t.db.execute<Row>(sql`
    select id, role, metadata, (select string_agg(p->>'text', '') from jsonb_array_elements(parts) p) as text
      from messages where thread_id = ${threadId} order by created_at, id`);
}

/** Model calls made for a thread (its first message carries the marker), and those that answered a wake-up notice. */
const callsFor = (marker: string) => fake.requests.filter((r) => r.rawBody.includes(marker));
const wakeupCallsFor = (marker: string) => callsFor(marker).filter((r) => lastText(r).includes(NOTICE));

async function childWakeups(threadId: string) {
  return t.db.execute<{ settled: boolean; done: boolean; message_id: string | null }>(sql`
    select settled_at is not null as settled, done_at is not null as done, message_id from child_wakeups where thread_id = ${threadId} order by id`);
}

/** Sends a message that starts a background task, and waits for the response (not the task) to end. */
async function startBackground(user: TestUser, threadId: string, marker: string) {
  const { res } = await post(user, threadId, `[[bg]] ${marker}`);
  expect(res.status).toBe(200);
  await res.text();
}

describe("lead runs nobody typed meet the daily token quota", () => {
  it("a queued message whose turn comes over the quota gets a notice, and the model is not called", async () => {
    const user = await makeUser(t, "queued");
    const threadId = await makeThread(t, user);
    // One token a day: the first response's own tokens use it up, but only once it has ended.
    getConfig().quotas.max_tokens_per_day = 1;
    const marker = `m-${randomUUID()}`;
    const first = await post(user, threadId, `[[slow]] ${marker}`);
    expect(first.res.status).toBe(200);
    const queued = await post(user, threadId, "[[echo]] and then this, please");
    expect(queued.res.status).toBe(202);
    await first.res.text();

    const notice = await waitUntil("the queued message's turn", async () => (await messagesOf(threadId)).find((m) => m.id === replyIdFor(queued.message.id)));
    expect(notice).toMatchObject({ role: "assistant", metadata: { notice: "daily_token_quota" } });
    expect(notice.text).toMatch(/^I did not answer this message: the daily token quota is used up \(\d+ of 1 tokens today, quotas\.max_tokens_per_day\); it resets at 00:00 UTC\.$/);
    expect((await messagesOf(threadId)).map((m) => [m.role, m.id === queued.message.id || m.id === notice.id])).toEqual([
      ["user", false],
      ["assistant", false],
      ["user", true],
      ["assistant", true],
    ]);
    // One model call: the first response. The queued message never reached the model.
    expect(callsFor(marker)).toHaveLength(1);
    expect(fake.requests.filter((r) => r.rawBody.includes("and then this, please"))).toHaveLength(0);
    const [runs] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from agent_runs where thread_id = ${threadId}`);
    expect(runs!.n).toBe(1);
    // The thread is free again, and a typed message meets the quota at the door.
    const typed = await post(user, threadId, "[[echo]] still there?");
    expect(typed.res.status).toBe(429);
    expect((await typed.res.json()).error.code).toBe("quota_exceeded");
  });

  it("messages queued behind one refused over the quota get one notice between them, not one each", async () => {
    const user = await makeUser(t, "queued-many");
    const threadId = await makeThread(t, user);
    getConfig().quotas.max_tokens_per_day = 1;
    const marker = `m-${randomUUID()}`;
    const first = await post(user, threadId, `[[slow]] ${marker}`);
    expect(first.res.status).toBe(200);
    const queued = [];
    for (let i = 1; i <= 5; i++) {
      const q = await post(user, threadId, `[[echo]] queued number ${i}`);
      expect(q.res.status).toBe(202);
      queued.push(q.message.id);
    }
    await first.res.text();

    const notice = await waitUntil("the queue's notice", async () => (await messagesOf(threadId)).find((m) => m.metadata?.notice));
    // Nothing more comes: the sweep and every process find the queue empty.
    await new Promise((r) => setTimeout(r, 1_500));
    const messages = await messagesOf(threadId);
    expect(messages.map((m) => [m.role, m.metadata?.notice ?? null])).toEqual([
      ["user", null],
      ["assistant", null],
      ...queued.map(() => ["user", null]),
      ["assistant", "daily_token_quota"],
    ]);
    // The queued messages joined the conversation in the order they were sent, each unqueued.
    expect(messages.slice(2, 7).map((m) => m.id)).toEqual(queued);
    expect(messages.every((m) => m.metadata?.queued === undefined)).toBe(true);
    expect(notice.id).toBe(replyIdFor(queued[0]!));
    expect(notice.text).toMatch(/^I did not answer these 5 messages: the daily token quota is used up \(\d+ of 1 tokens today/);
    expect(fake.requests.filter((r) => r.rawBody.includes("queued number"))).toHaveLength(0);
  });

  it("a children_settled wake-up over the quota stores a notice and makes no model call", async () => {
    const user = await makeUser(t, "children");
    const threadId = await makeThread(t, user);
    getConfig().quotas.max_tokens_per_day = 1;
    const marker = `m-${randomUUID()}`;
    await startBackground(user, threadId, marker);
    runSettlements();
    await waitUntil("the wake-up done", async () => ((await childWakeups(threadId))[0]?.done ? true : undefined), 30_000);

    const messages = await messagesOf(threadId);
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "assistant"]);
    const notice = messages[2]!;
    expect(notice.metadata).toEqual({ trigger: "children_settled", run_ids: [expect.any(String)], notice: "daily_token_quota" });
    expect(notice.text).toMatch(
      /^The background task finished \(general: completed\), but I did not read its results: the daily token quota is used up .*\. Its results are on its card above\.$/,
    );
    expect((await childWakeups(threadId))[0]!.message_id).toBe(notice.id);
    // The response's two steps; the wake-up called nothing.
    expect(callsFor(marker)).toHaveLength(2);
    expect(wakeupCallsFor(marker)).toHaveLength(0);
  });

  it("a settled batch's wake-up over the quota stores a notice and makes no model call", async () => {
    await workerAlive(t);
    const user = await makeUser(t, "batch");
    const threadId = await makeThread(t, user);
    getConfig().quotas.max_tokens_per_day = 1;
    const marker = `m-${randomUUID()}`;
    const { res } = await post(user, threadId, `[[batch]] ${marker}`);
    expect(res.status).toBe(200);
    await res.text();
    const [batch] = await t.db.execute<{ id: string }>(sql`select id from subagent_batches where thread_id = ${threadId}`);
    expect(batch).toBeDefined();
    runSettlements();
    const cancelled = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches/${batch!.id}/cancel`, {
      method: "POST",
      headers: { authorization: `Bearer ${user.token}` },
    });
    expect(cancelled.status).toBe(200);

    const notice = await waitUntil("the wake-up's message", async () =>
      (await messagesOf(threadId)).find((m) => m.id === wakeupMessageId(batch!.id, 1)),
    );
    expect(notice.metadata).toEqual({ trigger: "batch_settled", batch_id: batch!.id, notice: "daily_token_quota" });
    expect(notice.text).toMatch(
      new RegExp(`^Batch ${batch!.id} cancelled \\(0 succeeded, 0 failed, 1 cancelled of 1\\), but I did not summarize it: the daily token quota is used up`),
    );
    expect(callsFor(marker)).toHaveLength(2);
    expect(wakeupCallsFor(marker)).toHaveLength(0);
  });
});

describe("chat.max_system_turns", () => {
  it("a chain of wake-ups (each starting another background task) stops at the cap with a notice, until a person writes", async () => {
    getConfig().chat.max_system_turns = 3;
    const user = await makeUser(t, "chain");
    const threadId = await makeThread(t, user);
    const marker = `m-${randomUUID()}`;
    chaining.add(marker);
    runSettlements();
    await startBackground(user, threadId, marker);

    const notice = await waitUntil(
      "the cap's notice",
      async () => (await messagesOf(threadId)).find((m) => m.metadata?.notice === "system_turns"),
      60_000,
    );
    // Nothing more comes: the fourth wake-up called no model, so no fifth background call started.
    await new Promise((r) => setTimeout(r, 1_500));
    const messages = await messagesOf(threadId);
    expect(messages.map((m) => [m.role, m.metadata?.trigger ?? null, m.metadata?.notice ?? null])).toEqual([
      ["user", null, null],
      ["assistant", null, null],
      ["assistant", "children_settled", null],
      ["assistant", "children_settled", null],
      ["assistant", "children_settled", null],
      ["assistant", "children_settled", "system_turns"],
    ]);
    expect(notice.text).toMatch(
      /^The background task finished \(general: completed\), but I did not read its results: I have answered 3 times in a row without a message from you \(chat\.max_system_turns is 3\); send a message to let me go on\. /,
    );
    expect(wakeupCallsFor(marker)).toHaveLength(3);
    const rows = await childWakeups(threadId);
    expect(rows).toHaveLength(4);
    expect(rows.every((r) => r.done)).toBe(true);

    // A person's message: the lead may go on again (this time it does not chain).
    chaining.delete(marker);
    await startBackground(user, threadId, "go on");
    await waitUntil("the next wake-up", async () => ((await childWakeups(threadId)).length === 5 && (await childWakeups(threadId))[4]!.done ? true : undefined), 30_000);
    const last = (await messagesOf(threadId)).at(-1)!;
    expect(last.metadata).toMatchObject({ trigger: "children_settled" });
    expect(last.metadata?.notice).toBeUndefined();
    expect(last.text).toBe("Summary: the background work is done.");
    expect(wakeupCallsFor(marker)).toHaveLength(4);
  }, 120_000);
});

describe("background wake-ups between users", () => {
  it("claims at most two of one user's wake-ups at once: another user's is not starved behind five", async () => {
    const a = await makeUser(t, "many");
    const b = await makeUser(t, "one");
    const aThreads = await Promise.all(Array.from({ length: 5 }, () => makeThread(t, a)));
    const bThread = await makeThread(t, b);
    const aMarker = `slow-${randomUUID()}`;
    slow.markers.add(aMarker);
    // Every call settles before any web process looks: A's five are due first.
    for (const threadId of aThreads) await startBackground(a, threadId, aMarker);
    await startBackground(b, bThread, `m-${randomUUID()}`);
    const settledAll = async () => {
      const [r] = await t.db.execute<{ n: number }>(sql`
        select count(*)::int as n from child_wakeups where user_id in (${a.userId}, ${b.userId}) and settled_at is not null`);
      return r!.n === 6 ? true : undefined;
    };
    await waitUntil("six background calls settled", settledAll, 30_000);

    const started = Date.now();
    runSettlements();
    const done = async (userId: string) => {
      const [r] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from child_wakeups where user_id = ${userId} and done_at is not null`);
      return r!.n;
    };
    await waitUntil("B's wake-up done", async () => ((await done(b.userId)) === 1 ? true : undefined), 30_000);
    const bMs = Date.now() - started;
    // B did not wait behind A's slow ones; A had at most its two running meanwhile.
    expect(await done(a.userId)).toBeLessThanOrEqual(2);
    expect(bMs).toBeLessThan(SLOW_WAKEUP_MS);
    await waitUntil("A's wake-ups done", async () => ((await done(a.userId)) === 5 ? true : undefined), 60_000);
    expect(slow.maxInFlight.get(aMarker)).toBe(CHILD_WAKEUP_PER_USER_LIMIT);
    expect(Date.now() - started).toBeGreaterThanOrEqual(3 * SLOW_WAKEUP_MS);
  }, 120_000);
});

describe("one wake-up at a time per thread", () => {
  it("a settled batch and settled children in one thread, noticed at once by two web processes: one lead run at a time, and the cap exact", async () => {
    await workerAlive(t);
    const user = await makeUser(t, "race");
    const threadId = await makeThread(t, user);
    const marker = `slow-${randomUUID()}`;
    slow.markers.add(marker);
    // A batch and a background call in the thread, both settled before any web process looks.
    const batched = await post(user, threadId, `[[batch]] ${marker}`);
    expect(batched.res.status).toBe(200);
    await batched.res.text();
    const [batch] = await t.db.execute<{ id: string }>(sql`select id from subagent_batches where thread_id = ${threadId}`);
    await startBackground(user, threadId, marker);
    await waitUntil("the background call settled", async () => ((await childWakeups(threadId))[0]?.settled ? true : undefined), 30_000);
    const cancelled = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches/${batch!.id}/cancel`, {
      method: "POST",
      headers: { authorization: `Bearer ${user.token}` },
    });
    expect(cancelled.status).toBe(200);
    const wakeupCallsBefore = wakeupCallsFor(marker).length;
    expect(wakeupCallsBefore).toBe(0);

    // Two web processes, each with both pools, started together; one more wake-up reply is allowed.
    const env = { MODEL_BASE_URL: fake.url, MODEL_API_KEY: "sk-unattended", MODEL_NAME: "fake-lead", FLOTILLA__CHAT__MAX_SYSTEM_TURNS: "1" };
    workers.spawnWebRunner("race-a", env);
    workers.spawnWebRunner("race-b", env);
    const bothDone = async () => {
      const [r] = await t.db.execute<{ n: number }>(sql`
        select ((select count(*) from batch_wakeups where thread_id = ${threadId} and done_at is not null)
              + (select count(*) from child_wakeups where thread_id = ${threadId} and done_at is not null))::int as n`);
      return r!.n === 2 ? true : undefined;
    };
    await waitUntil("both wake-ups done", bothDone, 60_000);

    // One lead response ran at a time (the model saw one wake-up at once, and the runs do not overlap).
    expect(slow.maxInFlight.get(marker)).toBe(1);
    const runs = await t.db.execute<{ started: string; finished: string }>(sql`
      select started_at::text as started, finished_at::text as finished from agent_runs
       where thread_id = ${threadId} and kind = 'lead' order by started_at`);
    for (let i = 1; i < runs.length; i++) expect(Date.parse(runs[i]!.started) >= Date.parse(runs[i - 1]!.finished)).toBe(true);
    // chat.max_system_turns 1: one wake-up answered by the model, the other a notice.
    const replies = (await messagesOf(threadId)).filter((m) => m.metadata?.trigger);
    expect(replies).toHaveLength(2);
    expect(replies.filter((m) => !m.metadata?.notice)).toHaveLength(1);
    expect(replies.filter((m) => m.metadata?.notice === "system_turns")).toHaveLength(1);
    expect(wakeupCallsFor(marker)).toHaveLength(1);
  }, 120_000);
});
