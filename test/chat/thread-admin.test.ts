import { batchSubagent } from "@/server/agent/registry";
import { eq, inArray, sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { DELETE as deleteRoute, PATCH as renameRoute } from "@/app/api/threads/[threadId]/route";
import { GET as listRoute } from "@/app/api/threads/route";
import { createRun } from "@/server/agent/runs";
import { submitBatch } from "@/server/batches/submit";
import { insertMessage } from "@/server/chat/messages";
import { createThread, getThreadForUser, touchThread } from "@/server/chat/threads";
import { loadConfig } from "@/server/config/load";
import { agentRuns, messages, subagentBatches, subagentBatchItems, threads } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, params, request, sessionCookie, useSuiteEnv } from "./support";

let t: TestDatabase;
let alice: { id: string; email: string; password: string };
let aliceCookie: string;
let bobCookie: string;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
  alice = await makeUser(t.db, "alice");
  aliceCookie = await sessionCookie(alice);
  bobCookie = await sessionCookie(await makeUser(t.db, "bob"));
});

const rename = (threadId: string, body: unknown, cookie = aliceCookie) =>
  renameRoute(request(`/api/threads/${threadId}`, { method: "PATCH", cookie, body }), params({ threadId }));
const remove = (threadId: string, cookie = aliceCookie) =>
  deleteRoute(request(`/api/threads/${threadId}`, { method: "DELETE", cookie }), params({ threadId }));
const count = async (table: typeof messages | typeof agentRuns | typeof subagentBatches, threadId: string) =>
  (await t.db.select({ n: sql<number>`count(*)::int` }).from(table).where(eq(table.threadId, threadId)))[0].n;

describe("PATCH /api/threads/{id}", () => {
  it("renames the owner's thread (whitespace collapsed) without moving it in the activity order", async () => {
    const older = await createThread(t.db, { userId: alice.id, title: "Older" });
    const newer = await createThread(t.db, { userId: alice.id, title: "Newer" });
    await touchThread(t.db, { userId: alice.id, threadId: newer.id });
    const res = await rename(older.id, { title: "  Trip   to Lisbon " });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: older.id, title: "Trip to Lisbon" });
    const list = (await (await listRoute(request("/api/threads", { cookie: aliceCookie }), undefined)).json()).threads as { id: string }[];
    expect(list.findIndex((x) => x.id === newer.id)).toBeLessThan(list.findIndex((x) => x.id === older.id));
  });

  it("answers 404 to anyone but the owner and changes nothing", async () => {
    const thread = await createThread(t.db, { userId: alice.id, title: "Private" });
    for (const threadId of [thread.id, "00000000-0000-0000-0000-000000000000", "nope"]) {
      const res = await rename(threadId, { title: "Hijacked" }, bobCookie);
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: { code: "not_found", message: "thread not found" } });
    }
    expect((await getThreadForUser(t.db, { userId: alice.id, threadId: thread.id })).title).toBe("Private");
  });

  it.each([
    ["a missing title", {}, /^title: is required/],
    ["an empty title", { title: "   " }, /^title: must not be empty/],
    ["a title of the wrong type", { title: 3 }, /^title: must be a string/],
    ["a too long title", { title: "x".repeat(201) }, /^title: must be at most 200/],
    ["an unknown field", { title: "x", user_id: "someone" }, /user_id/],
  ])("rejects %s with 400 naming the field", async (_name, body, message) => {
    const thread = await createThread(t.db, { userId: alice.id, title: "Keep" });
    const res = await rename(thread.id, body);
    expect(res.status).toBe(400);
    const err = (await res.json()).error;
    expect(err.code).toBe("validation_failed");
    expect(err.message).toMatch(message);
    expect((await getThreadForUser(t.db, { userId: alice.id, threadId: thread.id })).title).toBe("Keep");
  });
});

describe("DELETE /api/threads/{id}", () => {
  async function populated() {
    const thread = await createThread(t.db, { userId: alice.id, title: "Doomed" });
    await insertMessage(t.db, { threadId: thread.id, message: { id: `u_${thread.id}`, role: "user", parts: [{ type: "text", text: "hi" }] } });
    await createRun(t.db, { userId: alice.id, threadId: thread.id, kind: "lead", definition: "lead", model: "simulator", status: "running" });
    const config = loadConfig();
    const { batch: active } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      userId: alice.id,
      threadId: thread.id,
      config,
      input: { submission_key: `active-${thread.id}`, prompt_template: "About {{item}}", items: ["Lisbon", "Oslo"] },
    });
    const { batch: done } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      userId: alice.id,
      threadId: thread.id,
      config,
      input: { submission_key: `done-${thread.id}`, items: ["x"] },
    });
    await t.db.update(subagentBatches).set({ status: "completed" }).where(eq(subagentBatches.id, done.id));
    return { thread, batchIds: [active.id, done.id] };
  }

  it("answers 404 to anyone but the owner and deletes nothing", async () => {
    const { thread, batchIds } = await populated();
    for (const threadId of [thread.id, "00000000-0000-0000-0000-000000000000", "nope"]) {
      const res = await remove(threadId, bobCookie);
      expect(res.status).toBe(404);
    }
    expect(await count(messages, thread.id)).toBe(1);
    expect(await count(agentRuns, thread.id)).toBe(1);
    const [batch] = await t.db.select().from(subagentBatches).where(eq(subagentBatches.id, batchIds[0]));
    expect(batch.status).toBe("queued");
  });

  it("cancels the thread's active batches, then removes the thread and all its data", async () => {
    const { thread, batchIds } = await populated();
    // Workers learn of the cancel through the batch channel before the rows go.
    const heard: string[] = [];
    const listener = await t.sql.listen("flotilla_batches", (p) => heard.push(p));
    const res = await remove(thread.id);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: thread.id, deleted: true, cancelled_batches: 1 });
    await expect.poll(() => heard).toContain(`cancel:${batchIds[0]}`);
    await listener.unlisten();

    expect(await t.db.select().from(threads).where(eq(threads.id, thread.id))).toEqual([]);
    expect(await count(messages, thread.id)).toBe(0);
    expect(await count(agentRuns, thread.id)).toBe(0);
    expect(await t.db.select().from(subagentBatches).where(inArray(subagentBatches.id, batchIds))).toEqual([]);
    expect(await t.db.select().from(subagentBatchItems).where(inArray(subagentBatchItems.batchId, batchIds))).toEqual([]);
    expect((await remove(thread.id)).status).toBe(404);
  });
});
