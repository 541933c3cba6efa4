import { and, eq, sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import { GET as reattach } from "@/app/api/threads/[threadId]/chat/stream/route";
import { POST as stopRoute } from "@/app/api/threads/[threadId]/runs/[runId]/stop/route";
import { THREAD_BUSY_MESSAGE } from "@/lib/api/chat";
import { createRun } from "@/server/agent/runs";
import { startLeadRun } from "@/server/chat/lead-run";
import { loadMessages } from "@/server/chat/messages";
import { notifyChatStream } from "@/server/chat/streams";
import { createThread } from "@/server/chat/threads";
import { loadConfig } from "@/server/config/load";
import { createDatabase, type Database } from "@/server/db/client";
import { agentRuns, chatStreams, messages } from "@/server/db/schema";
import { resolveModel } from "@/server/models";
import { recoverOnStartup } from "@/server/startup";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, params, readUIChunks, request, sessionCookie, useSuiteEnv } from "./support";

/**
 * Resumable lead responses. "Process A" is a database client of its own (own pool, own LISTEN
 * connection) that starts the run with startLeadRun, exactly what the chat route does; "process
 * B" is the route handlers on the web singleton's client. Nothing but PostgreSQL connects them,
 * which is what a second `next start` would share (the in-memory run registry is not on the
 * streaming path; Stop across processes goes through a notification, tested below).
 */

let t: TestDatabase;
let processA: Database;
let alice: { id: string; email: string; password: string };
let aliceCookie: string;
let bobCookie: string;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "30" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  processA = createDatabase(t.url, { applicationName: "flotilla-web-a" });
  alice = await makeUser(t.db, "alice");
  aliceCookie = await sessionCookie(alice);
  bobCookie = await sessionCookie(await makeUser(t.db, "bob"));
});
afterAll(async () => {
  await processA?.close();
});

let seq = 0;
const userMessage = (text: string) => ({ id: `u${Date.now()}x${++seq}`, role: "user" as const, parts: [{ type: "text" as const, text }] });

const config = () => loadConfig();
async function startOnA(threadId: string, text: string) {
  const c = config();
  const run = await startLeadRun(processA.db, { config: c, model: resolveModel(c), userId: alice.id, threadId, trigger: { kind: "user", message: userMessage(text) } });
  // A typed message always runs the model (only runs nobody typed may store a notice instead).
  if (!run.runId) throw new Error("no lead run started");
  return { ...run, runId: run.runId };
}
const getStream = (threadId: string, cookie = aliceCookie, signal?: AbortSignal) =>
  reattach(request(`/api/threads/${threadId}/chat/stream`, { cookie, signal }), params({ threadId }));
// `reject`: these cases are about the lock itself (test/chat/busy.test.ts covers the other policies).
const post = (threadId: string, text: string) =>
  chat(request(`/api/threads/${threadId}/chat?busy=reject`, { cookie: aliceCookie, body: { message: userMessage(text) } }), params({ threadId }));

const textOf = (chunks: Array<Record<string, unknown>>) =>
  chunks
    .filter((c) => c.type === "text-delta")
    .map((c) => c.delta)
    .join("");

async function runStatus(runId: string) {
  const [row] = await t.db.select({ status: agentRuns.status }).from(agentRuns).where(eq(agentRuns.id, runId));
  return row?.status;
}

/** Reads an SSE body until `until` holds for the text so far, then disconnects. */
async function readUntil(res: Response, until: (text: string) => boolean, abort: AbortController): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let seen = "";
  while (!until(seen)) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += decoder.decode(value);
  }
  abort.abort();
  await reader.cancel().catch(() => {});
  return seen;
}

describe("resumable lead responses across web processes", () => {
  it("streams a response started on process A from process B, from its first chunk, to the stored end", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const run = await startOnA(thread.id, "tell me about tides [[chars:1200]] [[sleep:1200]]");

    // A first reader on B disconnects mid-stream: the run goes on.
    const first = new AbortController();
    const partial = await readUntil(await getStream(thread.id, aliceCookie, first.signal), (s) => s.includes('"text-delta"'), first);
    expect(partial).toContain(`"messageId":"${run.messageId}"`);
    expect(await runStatus(run.runId)).toBe("running");

    // A second reader on B reattaches and gets the whole response, start to finish.
    const res = await getStream(thread.id);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
    const chunks = await readUIChunks(res);
    expect(chunks[0]).toMatchObject({ type: "start", messageId: run.messageId, messageMetadata: { runId: run.runId } });
    expect(chunks.at(-1)?.type).toBe("finish");
    const text = textOf(chunks);
    expect(text).toHaveLength(1200);

    await run.done;
    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(stored[1].id).toBe(run.messageId);
    expect(stored[1].parts.map((p) => (p.type === "text" ? p.text : "")).join("")).toBe(text);
    expect(stored[1].metadata).toMatchObject({ runId: run.runId, status: "completed" });

    // Nothing runs any more: 204, and the thread takes the next message.
    expect((await getStream(thread.id)).status).toBe(204);
    expect((await post(thread.id, "and now?")).status).toBe(200);
  });

  it("answers 204 when nothing runs and 404 for another user's thread", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    expect((await getStream(thread.id)).status).toBe(204);
    const run = await startOnA(thread.id, "slow [[sleep:600]]");
    const res = await getStream(thread.id, bobCookie);
    expect(res.status).toBe(404);
    expect((await res.json()).error.code).toBe("not_found");
    await run.done;
  });

  it("answers 409 with a clear message to a second message while the response runs, and stores nothing of it", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const run = await startOnA(thread.id, "slow [[sleep:800]]");
    const res = await post(thread.id, "are you there?");
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: { code: "conflict", message: THREAD_BUSY_MESSAGE } });
    await run.done;
    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(stored.some((m) => m.parts.some((p) => p.type === "text" && p.text === "are you there?"))).toBe(false);
  });

  it("lets exactly one of two simultaneous messages (two processes) through", async () => {
    for (let round = 0; round < 5; round++) {
      const thread = await createThread(t.db, { userId: alice.id });
      const results = await Promise.allSettled([startOnA(thread.id, "one"), post(thread.id, "two")]);
      const aStarted = results[0].status === "fulfilled";
      const bStatus = results[1].status === "fulfilled" ? results[1].value.status : 0;
      expect([aStarted, bStatus === 200]).toContainEqual(true);
      expect(aStarted !== (bStatus === 200)).toBe(true);
      if (!aStarted) expect((results[0] as PromiseRejectedResult).reason).toMatchObject({ code: "conflict" });
      else expect(bStatus).toBe(409);
      if (results[1].status === "fulfilled" && bStatus === 200) await readUIChunks(results[1].value);
      if (results[0].status === "fulfilled") await results[0].value.done;
      const users = (await loadMessages(t.db, { threadId: thread.id })).filter((m) => m.role === "user");
      expect(users).toHaveLength(1);
    }
  });

  it("stops a response running on process A when Stop is pressed on process B", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const run = await startOnA(thread.id, "long [[chars:4000]] [[sleep:5000]]");
    const watcher = new AbortController();
    await readUntil(await getStream(thread.id, aliceCookie, watcher.signal), (s) => s.includes('"text-delta"'), watcher);
    // The stop route of this (test) process finds the run live in the shared in-memory
    // registry; the notification a real second process relies on is proven on its own here.
    await notifyChatStream(t.db, `stop:${run.runId}`);
    await run.done;
    expect(await runStatus(run.runId)).toBe("cancelled");
    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored[1]?.metadata).toMatchObject({ runId: run.runId, status: "cancelled" });
    expect((await getStream(thread.id)).status).toBe(204);
  });

  it("the stop route ends the run and the reattached stream", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const run = await startOnA(thread.id, "long [[chars:4000]] [[sleep:5000]]");
    const reading = getStream(thread.id).then(readUIChunks);
    const res = await stopRoute(
      request(`/api/threads/${thread.id}/runs/${run.runId}/stop`, { method: "POST", cookie: aliceCookie }),
      params({ threadId: thread.id, runId: run.runId }),
    );
    expect(res.status).toBe(200);
    const chunks = await reading;
    expect(textOf(chunks).length).toBeLessThan(4000);
    await run.done;
    expect(await runStatus(run.runId)).toBe("cancelled");
  });

  it("after a restart, finalizes the running response as interrupted, says so, and releases the thread", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    // What a web process that died mid-response leaves behind: its run, its lock, its user message.
    const run = await createRun(t.db, { userId: alice.id, threadId: thread.id, kind: "lead", definition: "lead", model: "simulator", prompt: "lost", status: "running" });
    await t.db.update(agentRuns).set({ ownerInstance: "dead-web-process" }).where(eq(agentRuns.id, run.id));
    await t.db.insert(messages).values({ id: `u-lost-${seq++}`, threadId: thread.id, role: "user", parts: [{ type: "text", text: "lost" }] });
    await t.db.insert(chatStreams).values({ threadId: thread.id, userId: alice.id, runId: run.id, messageId: "msg_lost" });
    expect((await post(thread.id, "hello?")).status).toBe(409);

    // A reader attached to the dead process's stream ends when recovery runs.
    const reading = getStream(thread.id).then(readUIChunks);
    const interrupted = await recoverOnStartup(new Date(Date.now() + 1000));
    expect(interrupted).toContain(run.id);
    await reading;
    expect(await runStatus(run.id)).toBe("interrupted");
    const [active] = await t.db
      .select({ n: sql<number>`count(*)::int` })
      .from(chatStreams)
      .where(and(eq(chatStreams.threadId, thread.id), eq(chatStreams.status, "active")));
    expect(active.n).toBe(0);
    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored.at(-1)?.parts[0]).toMatchObject({ type: "text", text: expect.stringContaining("interrupted by a server restart") });
    expect((await getStream(thread.id)).status).toBe(204);
    const next = await post(thread.id, "hello again");
    expect(next.status).toBe(200);
    await readUIChunks(next);
  });

  it("starts a run from a system trigger: the trigger is not stored, its metadata is on the reply", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const c = config();
    const run = await startLeadRun(processA.db, {
      config: c,
      model: resolveModel(c),
      userId: alice.id,
      threadId: thread.id,
      trigger: { kind: "system", text: "Batch b1 settled: 3 done.", metadata: { trigger: "batch_settled", batch_id: "b1" } },
    });
    await run.done;
    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored.map((m) => m.role)).toEqual(["assistant"]);
    expect(stored[0].metadata).toMatchObject({ trigger: "batch_settled", batch_id: "b1", runId: run.runId, status: "completed" });
  });
});
