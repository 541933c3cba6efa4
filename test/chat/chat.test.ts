import { eq, sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import { loadConfig } from "@/server/config/load";
import { buildLeadSystemPrompt } from "@/server/agent/lead";
import { loadMessages } from "@/server/chat/messages";
import { createThread, getThreadForUser } from "@/server/chat/threads";
import { agentRuns, messages } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, params, readUIChunks, request, sessionCookie, useSuiteEnv } from "./support";

let t: TestDatabase;
let alice: { id: string; email: string; password: string };
let aliceCookie: string;
let bobCookie: string;

beforeAll(async () => {
  t = await createTestDatabase();
  // Fast simulator; the suite must not reach any network model.
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "30" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  alice = await makeUser(t.db, "alice");
  aliceCookie = await sessionCookie(alice);
  bobCookie = await sessionCookie(await makeUser(t.db, "bob"));
});

let seq = 0;
const userMessage = (text: string, id = `u${Date.now()}x${++seq}`) => ({ id, role: "user", parts: [{ type: "text", text }] });

function post(threadId: string, body: unknown, init: { cookie?: string; signal?: AbortSignal; rawBody?: string } = {}) {
  return chat(
    request(`/api/threads/${threadId}/chat`, {
      method: "POST",
      cookie: init.cookie ?? aliceCookie,
      ...(init.rawBody !== undefined ? { rawBody: init.rawBody } : { body }),
      signal: init.signal,
    }),
    params({ threadId }),
  );
}

async function runOf(runId: string) {
  const [row] = await t.db.select().from(agentRuns).where(eq(agentRuns.id, runId));
  return row;
}

async function waitFor<T>(fn: () => Promise<T | undefined | false>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 25));
  }
}

const messageCount = async (threadId: string) =>
  (await t.db.select({ n: sql<number>`count(*)::int` }).from(messages).where(eq(messages.threadId, threadId)))[0].n;
const runCount = async () => (await t.db.select({ n: sql<number>`count(*)::int` }).from(agentRuns))[0].n;

describe("POST /api/threads/{id}/chat", () => {
  it("streams the simulator's reply with the run id as metadata, persists both messages and finishes the run", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const msg = userMessage("Plan a picnic for four");
    const res = await post(thread.id, { message: msg });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
    const chunks = await readUIChunks(res);

    const start = chunks[0] as { type: string; messageId: string; messageMetadata: { runId: string; model: string; simulator: boolean } };
    expect(start.type).toBe("start");
    expect(start.messageMetadata).toMatchObject({ model: "simulator", simulator: true, runId: expect.any(String) });
    const deltas = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta as string);
    expect(deltas.length).toBeGreaterThan(3); // streamed in pieces, not one blob
    const text = deltas.join("");
    expect(text).toContain('Simulated answer to "Plan a picnic for four".');
    expect(chunks.at(-1)?.type).toBe("finish");

    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored.map((m) => m.role)).toEqual(["user", "assistant"]);
    expect(stored[0]).toEqual(msg);
    expect(stored[1].id).toBe(start.messageId);
    expect(stored[1].parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text).join("")).toBe(text);
    expect(stored[1].metadata).toMatchObject({ runId: start.messageMetadata.runId, status: "completed" });

    const run = await runOf(start.messageMetadata.runId);
    expect(run).toMatchObject({ kind: "lead", definition: "lead", status: "completed", userId: alice.id, threadId: thread.id, model: "simulator" });
    expect(run.ownerInstance).toBeTruthy();
    expect(run.inputTokens).toBeGreaterThan(0);
    expect(run.outputTokens).toBeGreaterThan(0);
    expect(run.result).toBe(text);
    expect(run.finishedAt).toBeInstanceOf(Date);
    expect(stored[1].metadata?.usage).toEqual({ inputTokens: run.inputTokens, outputTokens: run.outputTokens });

    // The first message names the thread.
    expect((await getThreadForUser(t.db, { userId: alice.id, threadId: thread.id })).title).toBe("Plan a picnic for four");
  });

  it("names the thread without the simulator's directives, and keeps the default when nothing else is left", async () => {
    const named = await createThread(t.db, { userId: alice.id });
    await readUIChunks(await post(named.id, { message: userMessage("Plan a picnic [[sleep:10]] for four [[chars:40]]") }));
    expect((await getThreadForUser(t.db, { userId: alice.id, threadId: named.id })).title).toBe("Plan a picnic for four");

    // A long first message: cut at a word, with an ellipsis.
    const long = await createThread(t.db, { userId: alice.id });
    const words = "Summarise the quarterly support tickets by product area and urgency, then draft replies to the angriest";
    await readUIChunks(await post(long.id, { message: userMessage(words) }));
    const title = (await getThreadForUser(t.db, { userId: alice.id, threadId: long.id })).title;
    expect(title).toBe("Summarise the quarterly support tickets by product area and urgency, then draft…");
    expect(title.length).toBeLessThanOrEqual(80);

    const bare = await createThread(t.db, { userId: alice.id });
    await readUIChunks(await post(bare.id, { message: userMessage("[[sleep:10]]") }));
    expect((await getThreadForUser(t.db, { userId: alice.id, threadId: bare.id })).title).toBe(bare.title);
  });

  it("sends the stored history to the model on the next turn", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    await readUIChunks(await post(thread.id, { message: userMessage("first question") }));
    const res = await post(thread.id, { message: userMessage("second question") });
    const chunks = await readUIChunks(res);
    const runId = (chunks[0].messageMetadata as { runId: string }).runId;
    const stored = await loadMessages(t.db, { threadId: thread.id });
    expect(stored.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    // Input tokens grow with the history the model received.
    const runs = await t.db.select().from(agentRuns).where(eq(agentRuns.threadId, thread.id));
    const first = runs.find((r) => r.id !== runId)!;
    expect((await runOf(runId)).inputTokens).toBeGreaterThan(first.inputTokens);
  });

  it("keeps running when the client disconnects and stores the whole reply", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const controller = new AbortController();
    const res = await post(thread.id, { message: userMessage("write a lot [[chars:3000]] [[sleep:1500]]") }, { signal: controller.signal });
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let seen = "";
    let runId = "";
    while (!seen.includes('"text-delta"')) {
      const { value, done } = await reader.read();
      if (done) throw new Error("stream ended before any text");
      seen += decoder.decode(value);
      runId ||= /"runId":"([^"]+)"/.exec(seen)?.[1] ?? "";
    }
    controller.abort();
    await reader.cancel().catch(() => {});

    const run = await waitFor(async () => {
      const r = await runOf(runId);
      return r.status !== "running" && r;
    });
    expect(run.status).toBe("completed");
    const stored = await waitFor(async () => {
      const m = await loadMessages(t.db, { threadId: thread.id });
      return m.length === 2 && m;
    });
    const text = stored[1].parts.map((p) => (p.type === "text" ? p.text : "")).join("");
    expect(text).toHaveLength(3000);
    expect(stored[1].metadata).toMatchObject({ runId, status: "completed" });
  });

  it("persists tool parts of a delegating reply and replays them as history on the next turn", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const chunks = await readUIChunks(await post(thread.id, { message: userMessage("task: list three facts about tides") }));
    expect(chunks.some((c) => c.type === "tool-input-available" && c.toolName === "task")).toBe(true);
    const stored = await loadMessages(t.db, { threadId: thread.id });
    const reply = stored[1];
    const toolPart = reply.parts.find((p) => p.type === "tool-task") as { state: string; input: { prompt: string } } | undefined;
    expect(toolPart?.state).toBe("output-available");
    expect(toolPart?.input.prompt).toBe("list three facts about tides");
    expect(reply.parts.some((p) => p.type === "text" && p.text.length > 0)).toBe(true);
    expect(reply.metadata?.status).toBe("completed");

    // The stored tool call and its result are valid model history for the next turn.
    const next = await readUIChunks(await post(thread.id, { message: userMessage("thanks, and now?") }));
    expect(next.some((c) => c.type === "error")).toBe(false);
    expect(next.filter((c) => c.type === "text-delta").map((c) => c.delta).join("")).toContain('Simulated answer to "thanks, and now?"');
    expect((await loadMessages(t.db, { threadId: thread.id })).map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
  });

  it("marks the run failed and streams an error when the model fails", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const chunks = await readUIChunks(await post(thread.id, { message: userMessage("please [[fail]]") }));
    const error = chunks.find((c) => c.type === "error");
    expect(error?.errorText).toMatch(/fail/i);
    const runId = (chunks[0].messageMetadata as { runId: string }).runId;
    const run = await waitFor(async () => {
      const r = await runOf(runId);
      return r.status !== "running" && r;
    });
    expect(run.status).toBe("failed");
    expect(run.error).toMatch(/fail/i);
    expect((await loadMessages(t.db, { threadId: thread.id }))[0].role).toBe("user");
  });

  it("answers 404 for another user's thread and writes nothing", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const runsBefore = await runCount();
    for (const threadId of [thread.id, "00000000-0000-0000-0000-000000000000", "zzz"]) {
      const res = await post(threadId, { message: userMessage("let me in") }, { cookie: bobCookie });
      expect(res.status).toBe(404);
      expect((await res.json()).error.code).toBe("not_found");
    }
    expect(await messageCount(thread.id)).toBe(0);
    expect(await runCount()).toBe(runsBefore);
  });

  it("answers 409 for a reused message id and writes nothing", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const msg = userMessage("once");
    await readUIChunks(await post(thread.id, { message: msg }));
    const runsBefore = await runCount();
    const res = await post(thread.id, { message: { ...msg, parts: [{ type: "text", text: "twice" }] } });
    expect(res.status).toBe(409);
    expect((await res.json()).error.message).toMatch(/^message\.id: /);
    expect(await messageCount(thread.id)).toBe(2);
    expect(await runCount()).toBe(runsBefore);
  });

  it.each([
    ["malformed JSON", { rawBody: '{"message":' }, 400, "invalid_json", /not valid JSON/],
    ["missing message", { body: {} }, 400, "validation_failed", /^message: is required/],
    ["full history instead of one message", { body: { messages: [userMessage("x")] } }, 400, "validation_failed", /^message: is required/],
    ["assistant role", { body: { message: { ...userMessage("x"), role: "assistant" } } }, 400, "validation_failed", /^message\.role: /],
    ["parts not an array", { body: { message: { ...userMessage("x"), parts: "hi" } } }, 400, "validation_failed", /^message\.parts: /],
    ["empty text", { body: { message: userMessage("   ") } }, 400, "validation_failed", /^message\.parts: must contain non-empty text/],
    ["non-text part", { body: { message: { ...userMessage("x"), parts: [{ type: "file", url: "data:," }] } } }, 400, "validation_failed", /^message\.parts\.0\.type: /],
    ["text of the wrong type", { body: { message: { ...userMessage("x"), parts: [{ type: "text", text: 1 }] } } }, 400, "validation_failed", /^message\.parts\.0\.text: must be a string/],
    ["bad message id", { body: { message: userMessage("x", "../../etc") } }, 400, "validation_failed", /^message\.id: /],
    ["unknown field", { body: { message: userMessage("x"), model: "gpt-9" } }, 400, "validation_failed", /model/],
    ["oversized body", { body: { message: userMessage("x".repeat(300_000)) } }, 413, "payload_too_large", /exceeds/],
  ])("rejects %s with a 4xx naming the problem and writes nothing", async (_name, init, status, code, message) => {
    const thread = await createThread(t.db, { userId: alice.id });
    const runsBefore = await runCount();
    const res = await post(thread.id, "body" in init ? init.body : undefined, "rawBody" in init ? { rawBody: init.rawBody } : {});
    expect(res.status).toBe(status);
    const body = await res.json();
    expect(body.error.code).toBe(code);
    expect(body.error.message).toMatch(message);
    expect(await messageCount(thread.id)).toBe(0);
    expect(await runCount()).toBe(runsBefore);
  });

  it("answers 401 without credentials", async () => {
    const thread = await createThread(t.db, { userId: alice.id });
    const res = await chat(request(`/api/threads/${thread.id}/chat`, { body: { message: userMessage("x") } }), params({ threadId: thread.id }));
    expect(res.status).toBe(401);
  });
});

describe("lead system prompt", () => {
  it("states the single resolved task concurrency, once", () => {
    const prompt = (env: Record<string, string>) => buildLeadSystemPrompt(loadConfig({ env, cwd: "/nonexistent" }), ["task"]);
    expect(prompt({})).toContain("At most 3 `task` calls per response");
    expect(prompt({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2", FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "5" })).toContain("At most 2 `task` calls");
    expect(prompt({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "64", FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "1" })).toContain("At most 1 `task` call per");
    expect(prompt({}).match(/At most \d+ `task` call/g)).toHaveLength(1);
    expect(prompt({ FLOTILLA__SUBAGENTS__MAX_DEPTH: "3" })).not.toContain("cannot delegate further");
  });
});
