import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchNotificationsSchema } from "@/lib/api/batches";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * What an open chat watches so the lead's wake-up replies appear without a reload, both kinds
 * alike (a settled batch's and settled background children's), over a real socket:
 * `GET /api/batch-notifications` lists the threads whose wake-up is pending (children still
 * running are not: they cost the chat no polls) and the replies stored in the last minute (a
 * quick wake-up can start and end between two of the chat's polls), only the caller's. The
 * wake-up rows are written with plain SQL in each state the settlement runner leaves them.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let bob: TestUser;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/batch-notifications", "/api/threads/[threadId]/subagent-batches"] });
  alice = await makeUser(tdb, "watch");
  bob = await makeUser(tdb, "other");
  await workerAlive(tdb);
});
afterAll(async () => {
  await server?.close();
});

async function notifications(user: TestUser) {
  const res = await fetch(`${server.origin}/api/batch-notifications`, { headers: { authorization: `Bearer ${user.token}` } });
  expect(res.status).toBe(200);
  return batchNotificationsSchema.parse(await res.json());
}

let n = 0;
/** A batch wake-up row of a new batch in this thread: pending, or done `doneSecondsAgo` seconds ago with its reply. */
async function batchWakeup(user: TestUser, threadId: string, state: { doneSecondsAgo?: number; messageId?: string }) {
  const res = await fetch(`${server.origin}/api/threads/${threadId}/subagent-batches`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify({ submission_key: `watch-${++n}`, items: ["x"] }),
  });
  expect(res.status).toBe(201);
  const batchId = ((await res.json()) as { id: string }).id;
  const doneAt = state.doneSecondsAgo === undefined ? null : new Date(Date.now() - state.doneSecondsAgo * 1000).toISOString();
  await tdb.sql`
    insert into batch_wakeups (batch_id, thread_id, user_id, settlement_seq, settled_status, done_at, message_id)
    values (${batchId}, ${threadId}, ${user.userId}, 1, 'completed', ${doneAt}::timestamptz, ${state.messageId ?? null})`;
}

/** A background call's wake-up row: children running (not settled), settled and due, or done with its reply. */
async function childWakeup(user: TestUser, threadId: string, state: { settled: boolean; doneSecondsAgo?: number; messageId?: string }) {
  const [run] = await tdb.sql<{ id: string }[]>`
    insert into agent_runs (user_id, thread_id, kind, definition, model, status)
    values (${user.userId}, ${threadId}, 'lead', 'lead', 'simulator', 'completed') returning id`;
  const doneAt = state.doneSecondsAgo === undefined ? null : new Date(Date.now() - state.doneSecondsAgo * 1000).toISOString();
  await tdb.sql`
    insert into child_wakeups (thread_id, user_id, lead_run_id, tool_call_id, tool, run_ids, owner_instance, settled_at, done_at, message_id)
    values (${threadId}, ${user.userId}, ${run!.id}, ${`call-${++n}`}, 'task', ${tdb.sql.array([run!.id])}::uuid[], 'web-1',
            ${state.settled ? new Date().toISOString() : null}::timestamptz, ${doneAt}::timestamptz, ${state.messageId ?? null})`;
}

describe("GET /api/batch-notifications: the chats' wake-up watch", () => {
  it("lists threads whose wake-up of either kind is pending, not those whose children still run", async () => {
    const batchPending = await makeThread(tdb, alice);
    const childDue = await makeThread(tdb, alice);
    const childRunning = await makeThread(tdb, alice);
    await batchWakeup(alice, batchPending, {});
    await childWakeup(alice, childDue, { settled: true });
    // The reply's id is written when the lead starts; the row is pending until the reply is stored.
    await childWakeup(alice, childRunning, { settled: false });

    const { pending_wakeups } = await notifications(alice);
    expect(pending_wakeups.sort()).toEqual([batchPending, childDue].sort());
    expect((await notifications(bob)).pending_wakeups).toEqual([]);
  });

  it("lists the replies of the last minute of both kinds, newest first, and only the caller's", async () => {
    const thread = await makeThread(tdb, alice);
    await batchWakeup(alice, thread, { doneSecondsAgo: 20, messageId: "wake_batch_reply" });
    await childWakeup(alice, thread, { settled: true, doneSecondsAgo: 5, messageId: "msg_children_reply" });
    // Older than a minute, or done without a stored reply (its thread was gone): not listed.
    await batchWakeup(alice, thread, { doneSecondsAgo: 120, messageId: "wake_old_reply" });
    await childWakeup(alice, thread, { settled: true, doneSecondsAgo: 3 });
    const other = await makeThread(tdb, bob);
    await childWakeup(bob, other, { settled: true, doneSecondsAgo: 1, messageId: "msg_bobs_reply" });

    const mine = (await notifications(alice)).recent_replies.filter((r) => r.thread_id === thread);
    expect(mine).toEqual([
      { thread_id: thread, message_id: "msg_children_reply" },
      { thread_id: thread, message_id: "wake_batch_reply" },
    ]);
    expect((await notifications(bob)).recent_replies).toEqual([{ thread_id: other, message_id: "msg_bobs_reply" }]);
    // Done rows are not pending.
    expect((await notifications(alice)).pending_wakeups).not.toContain(thread);
  });
});
