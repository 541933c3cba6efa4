import { and, asc, eq, sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { THREAD_BUSY_MESSAGE } from "@/lib/api/chat";
import { createRun } from "@/server/agent/runs";
import { replyIdFor, startQueuedResponses } from "@/server/chat/lead-run";
import { loadMessages } from "@/server/chat/messages";
import { getConfig } from "@/server/config/load";
import { createDatabase, type Database } from "@/server/db/client";
import { agentRuns, chatStreams, messages } from "@/server/db/schema";
import { resolveModel } from "@/server/models";
import { recoverOnStartup } from "@/server/startup";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";
import { waitUntil } from "../loop/support";

/**
 * Messages to a busy thread (chat.busy_policy and `?busy=`), over a real socket: the route
 * handlers behind the front door, real PostgreSQL, the simulator as the lead's model. The
 * "restart" cases use database clients of their own as other web processes.
 */

process.env.FLOTILLA__SIMULATOR__LATENCY_MS = "20";
for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
const t = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;
let processA: Database;
let processB: Database;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/chat"] });
  alice = await makeUser(t, "alice");
  bob = await makeUser(t, "bob");
  processA = createDatabase(t.url, { applicationName: "flotilla-web-a" });
  processB = createDatabase(t.url, { applicationName: "flotilla-web-b" });
});
afterAll(async () => {
  // Responses a test left running end before the pools close.
  await waitUntil("no active response", async () => ((await activeStreams()) === 0 ? true : undefined), 30_000).catch(() => {});
  await server?.close();
  await processA?.close();
  await processB?.close();
});

let seq = 0;
const userMessage = (text: string) => ({ id: `u${Date.now().toString(36)}x${++seq}`, role: "user", parts: [{ type: "text", text }] });

function post(threadId: string, text: string, options: { busy?: string; user?: TestUser } = {}) {
  const message = userMessage(text);
  const query = options.busy === undefined ? "" : `?busy=${encodeURIComponent(options.busy)}`;
  const res = fetch(`${server.origin}/api/threads/${threadId}/chat${query}`, {
    method: "POST",
    headers: { authorization: `Bearer ${(options.user ?? alice).token}`, "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
  return { message, res };
}

/** The text of an SSE UI message stream body. */
async function streamedText(res: Response): Promise<string> {
  const body = await res.text();
  return body
    .split("\n")
    .filter((l) => l.startsWith("data: ") && l !== "data: [DONE]")
    .map((l) => JSON.parse(l.slice(6)) as { type: string; delta?: string })
    .filter((c) => c.type === "text-delta")
    .map((c) => c.delta)
    .join("");
}

async function activeStreams(threadId?: string): Promise<number> {
  const [row] = await t.db
    .select({ n: sql<number>`count(*)::int` })
    .from(chatStreams)
    .where(and(eq(chatStreams.status, "active"), threadId ? eq(chatStreams.threadId, threadId) : undefined));
  return row?.n ?? 0;
}

/** Waits until the thread has no queued message and no running response. */
async function settled(threadId: string): Promise<void> {
  await waitUntil(
    "the thread's queue drained",
    async () => {
      const queued = await t.db.execute(sql`select 1 from messages where thread_id = ${threadId} and metadata->>'queued' = 'true'`);
      return queued.length === 0 && (await activeStreams(threadId)) === 0 ? true : undefined;
    },
    60_000,
  );
}

const text = (m: { parts: unknown[] }) => (m.parts as Array<{ type: string; text?: string }>).map((p) => (p.type === "text" ? p.text : "")).join("");

async function leadRuns(threadId: string) {
  return t.db
    .select({ id: agentRuns.id, prompt: agentRuns.prompt, status: agentRuns.status })
    .from(agentRuns)
    .where(and(eq(agentRuns.threadId, threadId), eq(agentRuns.kind, "lead")))
    .orderBy(asc(agentRuns.createdAt));
}

async function threadJson(threadId: string, user = alice) {
  const res = await fetch(`${server.origin}/api/threads/${threadId}`, { headers: { authorization: `Bearer ${user.token}` } });
  return (await res.json()) as { messages: Array<{ id: string; role: string; parts: unknown[]; metadata?: Record<string, unknown> | null }> };
}

describe("a message to a busy thread", () => {
  it("enqueue (the default): 202 with positions, shown queued, answered in order with one response each", async () => {
    const threadId = await makeThread(t, alice);
    // Long enough to still run while the next two are posted and checked (a loaded machine too).
    const first = post(threadId, "first [[sleep:5000]]");
    const firstRes = await first.res;
    expect(firstRes.status).toBe(200);
    const firstText = streamedText(firstRes);

    const second = post(threadId, "[[echo]] second answer");
    const secondRes = await second.res;
    expect(secondRes.status).toBe(202);
    expect(await secondRes.json()).toEqual({ queued: true, position: 1 });
    const third = post(threadId, "[[echo]] third answer");
    const thirdRes = await third.res;
    expect(thirdRes.status).toBe(202);
    expect(await thirdRes.json()).toEqual({ queued: true, position: 2 });

    // The thread shows them queued (what a reload renders); the lead's history does not have them.
    const shown = await threadJson(threadId);
    expect(shown.messages.find((m) => m.id === second.message.id)?.metadata).toEqual({ queued: true, position: 1 });
    expect(shown.messages.find((m) => m.id === third.message.id)?.metadata).toEqual({ queued: true, position: 2 });
    const history = (await loadMessages(t.db, { threadId })).map((m) => m.id);
    expect(history).not.toContain(second.message.id);
    expect(history).not.toContain(third.message.id);

    expect((await firstText).length).toBeGreaterThan(0);
    await settled(threadId);
    const stored = await loadMessages(t.db, { threadId });
    expect(stored.map((m) => [m.role, m.role === "user" ? m.id : undefined])).toEqual([
      ["user", first.message.id],
      ["assistant", undefined],
      ["user", second.message.id],
      ["assistant", undefined],
      ["user", third.message.id],
      ["assistant", undefined],
    ]);
    // Each queued message got its own reply, under the id derived from it, and lost its flags.
    expect(stored[3]!.id).toBe(replyIdFor(second.message.id));
    expect(text(stored[3]!)).toBe("second answer");
    expect(stored[5]!.id).toBe(replyIdFor(third.message.id));
    expect(text(stored[5]!)).toBe("third answer");
    expect(stored[2]!.metadata).toBeUndefined();
    expect(stored[4]!.metadata).toBeUndefined();
    const runs = await leadRuns(threadId);
    expect(runs.map((r) => [r.prompt, r.status])).toEqual([
      ["first [[sleep:5000]]", "completed"],
      ["[[echo]] second answer", "completed"],
      ["[[echo]] third answer", "completed"],
    ]);
    // An idle thread answers the next message at once again.
    const next = post(threadId, "[[echo]] idle again");
    const nextRes = await next.res;
    expect(nextRes.status).toBe(200);
    expect(await streamedText(nextRes)).toBe("idle again");
  });

  it("reject (?busy=reject under the default enqueue): 409 with the clear message, and stores nothing", async () => {
    const threadId = await makeThread(t, alice);
    const first = await post(threadId, "slow [[sleep:3000]]").res;
    const refused = post(threadId, "are you there?", { busy: "reject" });
    const res = await refused.res;
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: { code: "conflict", message: THREAD_BUSY_MESSAGE } });
    await streamedText(first);
    await settled(threadId);
    const stored = await loadMessages(t.db, { threadId, withQueued: true });
    expect(stored.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(stored.some((m) => m.id === refused.message.id)).toBe(false);
  });

  it("answers 400 naming busy for a bad ?busy=, busy thread or idle, and stores nothing", async () => {
    const threadId = await makeThread(t, alice);
    for (const busy of ["queue", "", "ENQUEUE", "x".repeat(5000)]) {
      const res = await post(threadId, "hello", { busy }).res;
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({
        error: { code: "validation_failed", message: "busy: must be one of enqueue, interrupt, reject" },
      });
    }
    const first = await post(threadId, "slow [[sleep:800]]").res;
    const res = await post(threadId, "while busy", { busy: "wait" }).res;
    expect(res.status).toBe(400);
    expect((await res.json()).error.message).toMatch(/^busy: /);
    await streamedText(first);
    await settled(threadId);
    expect((await loadMessages(t.db, { threadId, withQueued: true })).map((m) => m.role)).toEqual(["user", "assistant"]);
  });

  it("a configured reject holds: ?busy=enqueue and ?busy=interrupt answer 409, store nothing and stop nothing", async () => {
    const config = getConfig();
    config.chat.busy_policy = "reject";
    try {
      const threadId = await makeThread(t, alice);
      const first = await post(threadId, "slow [[chars:400]] [[sleep:3000]]").res;
      const firstText = streamedText(first);
      const refused = [post(threadId, "refused by the configured policy"), post(threadId, "queue me", { busy: "enqueue" }), post(threadId, "stop that", { busy: "interrupt" })];
      for (const r of refused) {
        const res = await r.res;
        expect(res.status).toBe(409);
        expect(await res.json()).toEqual({ error: { code: "conflict", message: THREAD_BUSY_MESSAGE } });
      }
      // The running response was not stopped: it ran to its end.
      expect((await firstText).length).toBeGreaterThanOrEqual(400);
      await settled(threadId);
      expect((await leadRuns(threadId)).map((r) => r.status)).toEqual(["completed"]);
      const stored = await loadMessages(t.db, { threadId, withQueued: true });
      expect(stored.map((m) => m.role)).toEqual(["user", "assistant"]);
      for (const r of refused) expect(stored.some((m) => m.id === r.message.id)).toBe(false);
      // An idle thread answers whatever ?busy= asks.
      const idle = await post(threadId, "[[echo]] idle now", { busy: "enqueue" }).res;
      expect(idle.status).toBe(200);
      expect(await streamedText(idle)).toBe("idle now");
    } finally {
      config.chat.busy_policy = "enqueue";
    }
  });

  it("under a configured interrupt, ?busy= picks any of the three", async () => {
    const config = getConfig();
    config.chat.busy_policy = "interrupt";
    try {
      const threadId = await makeThread(t, alice);
      const first = await post(threadId, "slow [[sleep:3000]]").res;
      const firstText = streamedText(first);
      const refused = post(threadId, "not now", { busy: "reject" });
      expect((await refused.res).status).toBe(409);
      const queued = await post(threadId, "[[echo]] after you", { busy: "enqueue" }).res;
      expect(queued.status).toBe(202);
      expect(await queued.json()).toEqual({ queued: true, position: 1 });
      await firstText;
      await settled(threadId);
      const stored = await loadMessages(t.db, { threadId, withQueued: true });
      expect(stored.map((m) => text(m))).toEqual(["slow [[sleep:3000]]", expect.any(String), "[[echo]] after you", "after you"]);
      expect((await leadRuns(threadId)).map((r) => r.status)).toEqual(["completed", "completed"]);
    } finally {
      config.chat.busy_policy = "enqueue";
    }
  });

  it("chat.max_queued_messages (20): of 25 racing messages 20 wait and 5 answer 429 queue_full; a refused one stores nothing", async () => {
    const threadId = await makeThread(t, alice);
    const first = await post(threadId, "slow [[sleep:6000]]").res;
    const firstText = streamedText(first);
    const sent = Array.from({ length: 25 }, (_, i) => post(threadId, `[[echo]] q${i + 1}`));
    const answers = await Promise.all(sent.map(async (p) => ({ message: p.message, res: await p.res })));
    const accepted = answers.filter((a) => a.res.status === 202);
    const refused = answers.filter((a) => a.res.status !== 202);
    expect(accepted).toHaveLength(20);
    expect(refused.map((a) => a.res.status)).toEqual([429, 429, 429, 429, 429]);
    const positions = await Promise.all(accepted.map(async (a) => ((await a.res.json()) as { position: number }).position));
    expect(positions.sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    for (const r of refused)
      expect(await r.res.json()).toEqual({
        error: {
          code: "queue_full",
          message: "chat.max_queued_messages: 20 messages already wait in this thread (at most 20); send again once the lead has answered some",
        },
      });
    // Interrupting does not get past a full queue either (and stops nothing).
    const urgent = post(threadId, "stop everything", { busy: "interrupt" });
    expect((await urgent.res).status).toBe(429);
    const waiting = await loadMessages(t.db, { threadId, withQueued: true });
    expect(waiting.filter((m) => m.metadata?.queued)).toHaveLength(20);
    for (const r of [...refused, { message: urgent.message }]) expect(waiting.some((m) => m.id === r.message.id)).toBe(false);

    await firstText;
    await settled(threadId);
    const stored = await loadMessages(t.db, { threadId });
    // The first and the twenty queued ones, each answered once.
    expect(stored.filter((m) => m.role === "user")).toHaveLength(21);
    expect(stored.filter((m) => m.role === "assistant")).toHaveLength(21);
    expect((await leadRuns(threadId)).map((r) => r.status)).toEqual(Array.from({ length: 21 }, () => "completed"));
  }, 60_000);

  it("interrupt: stops the running response (its runs end cancelled) and streams the new one; queued messages keep their turn after it", async () => {
    const threadId = await makeThread(t, alice);
    const first = await post(threadId, "long [[chars:4000]] [[sleep:6000]]").res;
    expect(first.status).toBe(200);
    const firstText = streamedText(first);
    const waiting = post(threadId, "[[echo]] was queued");
    expect((await waiting.res).status).toBe(202);
    const [running] = await leadRuns(threadId);

    const urgent = post(threadId, "[[echo]] stop that, answer this", { busy: "interrupt" });
    const urgentRes = await urgent.res;
    expect(urgentRes.status).toBe(200);
    expect(urgentRes.headers.get("content-type")).toMatch(/text\/event-stream/);
    expect(await streamedText(urgentRes)).toBe("stop that, answer this");
    expect((await firstText).length).toBeLessThan(4000);

    await settled(threadId);
    const runs = await leadRuns(threadId);
    expect(runs.map((r) => [r.id === running!.id ? "first" : r.prompt, r.status])).toEqual([
      ["first", "cancelled"],
      ["[[echo]] stop that, answer this", "completed"],
      ["[[echo]] was queued", "completed"],
    ]);
    const stored = await loadMessages(t.db, { threadId });
    expect(stored.map((m) => (m.role === "user" ? m.id : m.role))).toEqual([
      expect.any(String),
      "assistant",
      urgent.message.id,
      "assistant",
      waiting.message.id,
      "assistant",
    ]);
    expect(stored[1]!.metadata).toMatchObject({ status: "cancelled" });
    expect(text(stored[3]!)).toBe("stop that, answer this");
    expect(text(stored[5]!)).toBe("was queued");
  });

  it("interrupt on an idle thread answers as usual", async () => {
    const threadId = await makeThread(t, alice);
    const res = await post(threadId, "[[echo]] nothing to stop", { busy: "interrupt" }).res;
    expect(res.status).toBe(200);
    expect(await streamedText(res)).toBe("nothing to stop");
  });

  it("another user's thread is 404 whatever the policy, and nothing is stored", async () => {
    const threadId = await makeThread(t, alice);
    const first = await post(threadId, "slow [[sleep:800]]").res;
    for (const busy of [undefined, "enqueue", "interrupt", "reject"]) {
      const res = await post(threadId, "let me in", { busy, user: bob }).res;
      expect(res.status).toBe(404);
    }
    expect((await fetch(`${server.origin}/api/threads/${threadId}`, { headers: { authorization: `Bearer ${bob.token}` } })).status).toBe(404);
    await streamedText(first);
    await settled(threadId);
    expect((await loadMessages(t.db, { threadId, withQueued: true })).map((m) => m.role)).toEqual(["user", "assistant"]);
    expect((await leadRuns(threadId)).length).toBe(1);
  });
});

describe("queued messages across restarts", () => {
  /** What a web process that died mid-response leaves: its run and lock, and a message queued behind them. */
  async function leftBehind() {
    const threadId = await makeThread(t, alice);
    const run = await createRun(t.db, { userId: alice.userId, threadId, kind: "lead", definition: "lead", model: "simulator", prompt: "lost", status: "running" });
    await t.db.update(agentRuns).set({ ownerInstance: "dead-web-process" }).where(eq(agentRuns.id, run.id));
    await t.db.insert(messages).values({ id: `lost${++seq}`, threadId, role: "user", parts: [{ type: "text", text: "lost" }] });
    await t.db.insert(chatStreams).values({ threadId, userId: alice.userId, runId: run.id, messageId: "msg_lost" });
    const queued = post(threadId, "[[echo]] still here");
    const res = await queued.res;
    expect(res.status).toBe(202);
    return { threadId, runId: run.id, queued: queued.message };
  }

  it("a starting web process answers a queue left behind, exactly once when two processes race", async () => {
    const lead = { config: getConfig(), model: resolveModel(getConfig()) };
    for (let round = 0; round < 4; round++) {
      const { threadId, runId, queued } = await leftBehind();
      // Nothing moves while the dead process's lock stands (its run still looks live).
      expect(await startQueuedResponses(processA.db, lead)).toBe(0);
      const shown = await threadJson(threadId);
      expect(shown.messages.find((m) => m.id === queued.id)?.metadata).toEqual({ queued: true, position: 1 });

      // Restart: recovery finalizes the lost run and releases its lock; then two web
      // processes' sweeps race for the queue.
      expect(await recoverOnStartup(new Date(Date.now() + 1000))).toContain(runId);
      const [a, b] = await Promise.all([startQueuedResponses(processA.db, lead), startQueuedResponses(processB.db, lead)]);
      expect(a + b).toBe(1);
      await settled(threadId);
      const stored = await loadMessages(t.db, { threadId });
      const replies = stored.filter((m) => m.id === replyIdFor(queued.id));
      expect(replies).toHaveLength(1);
      expect(text(replies[0]!)).toBe("still here");
      expect(stored.at(-2)?.id).toBe(queued.id);
      expect((await leadRuns(threadId)).filter((r) => r.prompt === "[[echo]] still here")).toHaveLength(1);
    }
  });

  it("a new message to a thread whose queue was left behind waits behind it and the queue moves", async () => {
    const { threadId, queued } = await leftBehind();
    await recoverOnStartup(new Date(Date.now() + 1000));
    // No sweep ran: the next message finds the queue, joins it, and starts its head.
    const later = post(threadId, "[[echo]] after it");
    const res = await later.res;
    expect(res.status).toBe(202);
    expect(await res.json()).toEqual({ queued: true, position: 2 });
    await settled(threadId);
    const stored = await loadMessages(t.db, { threadId });
    expect(stored.slice(-4).map((m) => (m.role === "user" ? m.id : text(m)))).toEqual([queued.id, "still here", later.message.id, "after it"]);
  });
});
