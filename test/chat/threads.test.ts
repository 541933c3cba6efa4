import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { GET as getThread } from "@/app/api/threads/[threadId]/route";
import { GET as listThreadsRoute, POST as createThreadRoute } from "@/app/api/threads/route";
import { createApiToken } from "@/server/auth/tokens";
import { insertMessage, loadMessages, saveMessage } from "@/server/chat/messages";
import {
  createThread,
  DERIVED_TITLE_MAX,
  getThreadForUser,
  listThreads,
  openBlankThread,
  shortTitle,
  touchThread,
} from "@/server/chat/threads";
import { threads } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, params, request, sessionCookie, useSuiteEnv } from "./support";

let t: TestDatabase;
let alice: { id: string; email: string; password: string };
let bob: { id: string; email: string; password: string };
let aliceCookie: string;
let bobCookie: string;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
  alice = await makeUser(t.db, "alice");
  bob = await makeUser(t.db, "bob");
  aliceCookie = await sessionCookie(alice);
  bobCookie = await sessionCookie(bob);
});

const threadCount = async () => (await t.db.select({ n: sql<number>`count(*)::int` }).from(threads))[0].n;

describe("shortTitle", () => {
  it("keeps a title that fits, whitespace collapsed", () => {
    expect(shortTitle("  Plan   the\nlaunch ", 80)).toBe("Plan the launch");
    expect(shortTitle("x".repeat(80), 80)).toBe("x".repeat(80));
  });

  it("cuts a long title at a word boundary and ends it with an ellipsis, within the limit", () => {
    const text =
      "Classify each of these support messages by urgency and product area, then summarise the angry ones for the team";
    const title = shortTitle(text, DERIVED_TITLE_MAX);
    expect(title).toBe("Classify each of these support messages by urgency and product area, then…");
    expect(title.length).toBeLessThanOrEqual(DERIVED_TITLE_MAX);
    // The word at the cut is never split, and punctuation before the cut is dropped.
    expect(shortTitle("alpha beta, gamma", 13)).toBe("alpha beta…");
    expect(shortTitle("one two three four", 17)).toBe("one two three…");
  });

  it("cuts mid-word only when one word is longer than half the room", () => {
    expect(shortTitle(`ab ${"x".repeat(100)}`, 20)).toBe(`ab ${"x".repeat(16)}…`);
    expect(shortTitle(`ab ${"x".repeat(100)}`, 20)).toHaveLength(20);
    // Never half a surrogate pair.
    expect(shortTitle(`${"x".repeat(18)}😀😀`, 20)).toBe(`${"x".repeat(18)}…`);
  });
});

describe("threads repository", () => {
  it("scopes every read to the owner", async () => {
    const thread = await createThread(t.db, { userId: alice.id, title: "  Alice's   plan " });
    expect(thread.title).toBe("Alice's plan");
    expect((await getThreadForUser(t.db, { userId: alice.id, threadId: thread.id })).id).toBe(thread.id);
    for (const threadId of [thread.id, "00000000-0000-0000-0000-000000000000", "not-a-uuid", ""]) {
      const err = await getThreadForUser(t.db, { userId: bob.id, threadId }).catch((e) => e);
      expect(err).toBeInstanceOf(AppError);
      expect(err.code).toBe("not_found");
    }
    expect((await listThreads(t.db, { userId: bob.id })).map((x) => x.id)).not.toContain(thread.id);
  });

  it("lists the most recently active thread first and only replaces default titles", async () => {
    const user = await makeUser(t.db, "order");
    const first = await createThread(t.db, { userId: user.id });
    const second = await createThread(t.db, { userId: user.id, title: "Kept" });
    expect(first.title).toBe("New thread");
    await touchThread(t.db, { userId: user.id, threadId: first.id, titleIfDefault: "Plan the launch" });
    await touchThread(t.db, { userId: user.id, threadId: second.id, titleIfDefault: "Ignored" });
    await touchThread(t.db, { userId: user.id, threadId: first.id });
    const list = await listThreads(t.db, { userId: user.id });
    expect(list.map((x) => [x.id, x.title])).toEqual([
      [first.id, "Plan the launch"],
      [second.id, "Kept"],
    ]);
    // Touching someone else's thread changes nothing.
    await touchThread(t.db, { userId: bob.id, threadId: second.id, titleIfDefault: "x" });
    expect((await listThreads(t.db, { userId: user.id }))[0].id).toBe(first.id);
  });

  it("stores UI messages in order, with ids scoped to their thread", async () => {
    const a = await createThread(t.db, { userId: alice.id });
    const b = await createThread(t.db, { userId: bob.id });
    const id = `m_${Date.now()}`;
    await insertMessage(t.db, { threadId: a.id, message: { id, role: "user", parts: [{ type: "text", text: "hi" }] } });
    await saveMessage(t.db, {
      threadId: a.id,
      message: { id: `${id}_r`, role: "assistant", parts: [{ type: "text", text: "hello" }], metadata: { runId: "r1" } },
    });
    await saveMessage(t.db, {
      threadId: a.id,
      message: { id: `${id}_r`, role: "assistant", parts: [{ type: "text", text: "hello there" }], metadata: { runId: "r1" } },
    });
    // Within a thread an id is taken once: a second insert, or a user message over an assistant's, conflicts.
    await expect(
      insertMessage(t.db, { threadId: a.id, message: { id, role: "user", parts: [{ type: "text", text: "again" }] } }),
    ).rejects.toMatchObject({ code: "conflict" });
    await expect(
      saveMessage(t.db, { threadId: a.id, message: { id: `${id}_r`, role: "user", parts: [{ type: "text", text: "mine now" }] } }),
    ).rejects.toMatchObject({ code: "conflict" });
    // The same ids in another thread are that thread's own messages and touch nothing of the first.
    await insertMessage(t.db, { threadId: b.id, message: { id, role: "user", parts: [{ type: "text", text: "same id" }] } });
    await saveMessage(t.db, { threadId: b.id, message: { id: `${id}_r`, role: "assistant", parts: [{ type: "text", text: "other" }] } });
    expect(await loadMessages(t.db, { threadId: a.id })).toEqual([
      { id, role: "user", parts: [{ type: "text", text: "hi" }] },
      { id: `${id}_r`, role: "assistant", parts: [{ type: "text", text: "hello there" }], metadata: { runId: "r1" } },
    ]);
    expect(await loadMessages(t.db, { threadId: b.id })).toEqual([
      { id, role: "user", parts: [{ type: "text", text: "same id" }] },
      { id: `${id}_r`, role: "assistant", parts: [{ type: "text", text: "other" }] },
    ]);
  });
});

describe("/api/threads", () => {
  it("creates (201) and lists the caller's threads with the session cookie", async () => {
    const res = await createThreadRoute(request("/api/threads", { cookie: aliceCookie, body: { title: "Research" } }), undefined);
    expect(res.status).toBe(201);
    const created = await res.json();
    expect(Object.keys(created).sort()).toEqual(["created_at", "id", "title", "updated_at"]);
    expect(created.title).toBe("Research");

    const list = await (await listThreadsRoute(request("/api/threads", { cookie: aliceCookie }), undefined)).json();
    expect(list.threads.map((x: { id: string }) => x.id)).toContain(created.id);
    const bobs = await (await listThreadsRoute(request("/api/threads", { cookie: bobCookie }), undefined)).json();
    expect(bobs.threads.map((x: { id: string }) => x.id)).not.toContain(created.id);
  });

  it("works with a Bearer token and an empty body", async () => {
    const token = await createApiToken(t.db, { userId: bob.id });
    const res = await createThreadRoute(request("/api/threads", { method: "POST", bearer: token }), undefined);
    expect(res.status).toBe(201);
    expect((await res.json()).title).toBe("New thread");
  });

  it("returns a thread with its messages to its owner and 404 to anyone else", async () => {
    const thread = await createThread(t.db, { userId: alice.id, title: "Mine" });
    await insertMessage(t.db, { threadId: thread.id, message: { id: `u_${thread.id}`, role: "user", parts: [{ type: "text", text: "q" }] } });
    const ok = await getThread(request(`/api/threads/${thread.id}`, { cookie: aliceCookie }), params({ threadId: thread.id }));
    expect(ok.status).toBe(200);
    const body = await ok.json();
    expect(body).toMatchObject({ id: thread.id, title: "Mine", messages: [{ id: `u_${thread.id}`, role: "user" }] });

    for (const threadId of [thread.id, "00000000-0000-0000-0000-000000000000", "not-a-uuid"]) {
      const res = await getThread(request(`/api/threads/${threadId}`, { cookie: bobCookie }), params({ threadId }));
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: { code: "not_found", message: "thread not found" } });
    }
  });

  it("answers 401 JSON without credentials", async () => {
    for (const res of [
      await listThreadsRoute(request("/api/threads"), undefined),
      await createThreadRoute(request("/api/threads", { body: {} }), undefined),
      await getThread(request("/api/threads/x"), params({ threadId: "x" })),
    ]) {
      expect(res.status).toBe(401);
      expect((await res.json()).error.code).toBe("unauthorized");
    }
  });

  it("rejects a cross-site cookie POST with 403 and writes nothing", async () => {
    const before = await threadCount();
    const res = await createThreadRoute(
      request("/api/threads", { cookie: aliceCookie, body: {}, headers: { origin: "https://evil.example" } }),
      undefined,
    );
    expect(res.status).toBe(403);
    expect(await threadCount()).toBe(before);
  });

  it.each([
    ["malformed JSON", { rawBody: '{"title": ' }, 400, "invalid_json", /not valid JSON/],
    ["title of the wrong type", { body: { title: 5 } }, 400, "validation_failed", /^title: must be a string/],
    ["null title", { body: { title: null } }, 400, "validation_failed", /^title: /],
    ["unknown field", { body: { title: "x", owner: "someone" } }, 400, "validation_failed", /owner/],
    ["too long title", { body: { title: "x".repeat(201) } }, 400, "validation_failed", /^title: must be at most 200/],
    ["non-object body", { body: "title" }, 400, "validation_failed", /expected object/],
    ["oversized body", { body: { title: "x".repeat(20_000) } }, 413, "payload_too_large", /exceeds 16384 bytes/],
  ])("rejects %s with a 4xx naming the problem and writes nothing", async (_name, init, status, code, message) => {
    const before = await threadCount();
    const res = await createThreadRoute(request("/api/threads", { method: "POST", cookie: aliceCookie, ...init }), undefined);
    expect(res.status).toBe(status);
    const body = await res.json();
    expect(body.error.code).toBe(code);
    expect(body.error.message).toMatch(message);
    expect(await threadCount()).toBe(before);
  });
});

describe("openBlankThread (the sidebar's New thread)", () => {
  it("reuses the newest thread while it is blank, and makes a new one once something happened in it", async () => {
    const user = await makeUser(t.db, "blank");
    const first = await openBlankThread(t.db, { userId: user.id });
    expect(first.created).toBe(true);
    const again = await openBlankThread(t.db, { userId: user.id });
    expect(again).toMatchObject({ created: false, thread: { id: first.thread.id } });

    await insertMessage(t.db, { threadId: first.thread.id, message: { id: `m-${first.thread.id}`, role: "user", parts: [{ type: "text", text: "hi" }] } });
    await touchThread(t.db, { userId: user.id, threadId: first.thread.id });
    const next = await openBlankThread(t.db, { userId: user.id });
    expect(next.created).toBe(true);
    expect(next.thread.id).not.toBe(first.thread.id);
    // A renamed thread is not blank either: the person named it for something.
    await t.db.update(threads).set({ title: "Named" }).where(sql`id = ${next.thread.id}`);
    expect((await openBlankThread(t.db, { userId: user.id })).created).toBe(true);
  });

  it("two clicks at once agree on one thread", async () => {
    const user = await makeUser(t.db, "blank-race");
    const results = await Promise.all(Array.from({ length: 6 }, () => openBlankThread(t.db, { userId: user.id })));
    expect(new Set(results.map((r) => r.thread.id)).size).toBe(1);
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(await listThreads(t.db, { userId: user.id })).toHaveLength(1);
  });

  it("POST /api/threads with reuse_blank answers 201 for a new thread and 200 for the reused one; other users never share it", async () => {
    const user = await makeUser(t.db, "blank-api");
    const other = await makeUser(t.db, "blank-api-other");
    const cookie = await sessionCookie(user);
    const post = (c: string) => createThreadRoute(request("/api/threads", { cookie: c, body: { reuse_blank: true } }), undefined);
    const created = await post(cookie);
    expect(created.status).toBe(201);
    const reused = await post(cookie);
    expect(reused.status).toBe(200);
    expect((await reused.json()).id).toBe((await created.json()).id);
    const theirs = await post(await sessionCookie(other));
    expect(theirs.status).toBe(201);
    const bad = await createThreadRoute(request("/api/threads", { cookie, body: { reuse_blank: "yes" } }), undefined);
    expect(bad.status).toBe(400);
    expect((await bad.json()).error.message).toBe("reuse_blank: must be true or false");
  });
});
