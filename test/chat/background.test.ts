import { eq, sql } from "drizzle-orm";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { POST as chat } from "@/app/api/threads/[threadId]/chat/route";
import { POST as stop } from "@/app/api/threads/[threadId]/runs/[runId]/stop/route";
import { backgroundJobCount } from "@/server/agent/background";
import { startBackgroundSweeps } from "@/server/chat/children-wakeup";
import { createThread } from "@/server/chat/threads";
import { agentRuns } from "@/server/db/schema";
import { HEARTBEAT_INTERVAL_MS, writeHeartbeat } from "@/server/runtime/heartbeat";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { Workers } from "../loop/support";
import { makeUser, params, readUIChunks, request, sessionCookie, useSuiteEnv } from "./support";

/**
 * Background delegation through the real chat route, PostgreSQL and web-runner processes: the
 * response ends while its children run on, the lead wakes exactly once with their results
 * (two runners racing), Stop after the response reaches them, and a process that dies with
 * children running leaves them interrupted and the lead woken once.
 */

const workers = new Workers();
let t: TestDatabase;
let alice: { id: string; email: string };
let cookie: string;
let heartbeat: ReturnType<typeof setInterval>;

beforeAll(async () => {
  t = await createTestDatabase();
  workers.use(t);
  useSuiteEnv(t.url, { FLOTILLA__SIMULATOR__LATENCY_MS: "20" });
  for (const k of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) delete process.env[k];
  alice = await makeUser(t.db, "bg");
  cookie = await sessionCookie(alice);
  // This process runs lead responses and their background children, as a web process does: it heartbeats.
  const beat = () => writeHeartbeat(t.db, { id: INSTANCE_ID, kind: "web", capacity: 4, running: 0 });
  await beat();
  heartbeat = setInterval(() => void beat().catch(() => {}), HEARTBEAT_INTERVAL_MS);
});

afterAll(() => clearInterval(heartbeat));
afterEach(async () => {
  await workers.stopAll();
});

let seq = 0;
async function send(threadId: string, text: string) {
  const res = await chat(
    request(`/api/threads/${threadId}/chat`, {
      method: "POST",
      cookie,
      body: { message: { id: `u${Date.now()}x${++seq}`, role: "user", parts: [{ type: "text", text }] } },
    }),
    params({ threadId }),
  );
  expect(res.status).toBe(200);
  return readUIChunks(res);
}

async function waitFor<T>(label: string, fn: () => Promise<T | undefined | false>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${label}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const statuses = async (ids: string[]) =>
  (await t.db.select({ id: agentRuns.id, status: agentRuns.status }).from(agentRuns)).filter((r) => ids.includes(r.id));

async function wakeMessages(threadId: string) {
  return t.db.execute<{ id: string; metadata: { trigger?: string; run_ids?: string[] }; text: string }>(sql`
    select id, metadata, (select string_agg(p->>'text', '') from jsonb_array_elements(parts) p) as text from messages
     where thread_id = ${threadId} and role = 'assistant' and metadata->>'trigger' = 'children_settled'
     order by created_at`);
}

async function wakeRows(threadId: string) {
  return t.db.execute<{ done_at: Date | null; claimed_by: string | null; attempts: number; message_id: string | null; interrupted: boolean }>(
    sql`select done_at, claimed_by, attempts, message_id, interrupted from child_wakeups where thread_id = ${threadId} order by id`,
  );
}

/** The receipt a background call answered in the stream, and the lead run of the response. */
function receiptOf(chunks: Array<Record<string, unknown>>) {
  const output = chunks.find((c) => c.type === "tool-output-available")?.output as { background: true; run_ids: string[] };
  const start = chunks.find((c) => c.type === "start") as { messageMetadata: { runId: string } };
  return { runIds: output.run_ids, leadRunId: start.messageMetadata.runId };
}

describe("background delegation", () => {
  it("ends the response while a background task and swarm run on, then wakes the lead exactly once each with their results (two runners racing)", async () => {
    workers.spawnWebRunner("web-a");
    workers.spawnWebRunner("web-b");
    const taskThread = (await createThread(t.db, { userId: alice.id })).id;
    const swarmThread = (await createThread(t.db, { userId: alice.id })).id;

    const taskChunks = await send(taskThread, "background task: count the tides [[sleep:1500]]");
    const task = receiptOf(taskChunks);
    // The stream has finished; the child has not.
    expect(taskChunks.at(-1)?.type).toBe("finish");
    expect(task.runIds).toHaveLength(1);
    expect((await statuses(task.runIds)).map((r) => r.status)).toEqual([expect.stringMatching(/^(pending|running)$/)]);
    const said = taskChunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
    expect(said).toContain("in the background");

    const swarmChunks = await send(swarmThread, "background swarm: Write a line about {{item}} [[sleep:800]] | the sea; the moon");
    const swarm = receiptOf(swarmChunks);
    expect(swarm.runIds).toHaveLength(2);
    // Every child row exists before the answer, parented to the lead run.
    const rows = await t.db.select().from(agentRuns).where(eq(agentRuns.parentRunId, swarm.leadRunId));
    expect(rows.map((r) => r.id).sort()).toEqual([...swarm.runIds].sort());

    for (const [threadId, receipt] of [
      [taskThread, task],
      [swarmThread, swarm],
    ] as const) {
      await waitFor("wake-up done", async () => (await wakeRows(threadId))[0]?.done_at);
      const msgs = await wakeMessages(threadId);
      expect(msgs).toHaveLength(1);
      expect(msgs[0]!.metadata).toMatchObject({ trigger: "children_settled", run_ids: receipt.runIds });
      const [row] = await wakeRows(threadId);
      expect(row).toMatchObject({ attempts: 1, message_id: msgs[0]!.id, interrupted: false });
      expect(["web-a", "web-b"]).toContain(row!.claimed_by);
      expect((await statuses(receipt.runIds)).map((r) => r.status)).toEqual(receipt.runIds.map(() => "completed"));
    }
    const taskWake = (await wakeMessages(taskThread))[0]!.text;
    expect(taskWake).toContain("The background task has finished (completed).");
    expect(taskWake).toContain('Simulated answer to "count the tides".');
    const swarmWake = (await wakeMessages(swarmThread))[0]!.text;
    expect(swarmWake).toContain("The background swarm has finished: 2 of 2 sub-agents completed.");
    expect(swarmWake).toMatch(/- item-1: Simulated answer to "Write a line about the sea"/);
    expect(swarmWake).toMatch(/- item-2: Simulated answer to "Write a line about the moon"/);

    // Nothing more arrives: one wake-up per call.
    await new Promise((r) => setTimeout(r, 1_500));
    expect(await wakeMessages(taskThread)).toHaveLength(1);
    expect(await wakeMessages(swarmThread)).toHaveLength(1);
    expect(backgroundJobCount()).toBe(0);
  }, 120_000);

  it("waits its turn in a busy thread: the wake-up comes after the response that held the thread, once", async () => {
    workers.spawnWebRunner("web-busy-a");
    workers.spawnWebRunner("web-busy-b");
    const threadId = (await createThread(t.db, { userId: alice.id })).id;
    const { runIds } = receiptOf(await send(threadId, "background task: a quick look [[sleep:300]]"));
    // The thread is busy for 5 s with the next message while the child settles.
    const slow = send(threadId, "Think slowly [[sleep:5000]]");
    await waitFor("child settled", async () => (await statuses(runIds))[0]?.status === "completed");
    await slow;
    await waitFor("wake-up done", async () => (await wakeRows(threadId))[0]?.done_at);
    const order = await t.db.execute<{ text: string; trigger: string | null }>(sql`
      select (select string_agg(p->>'text', '') from jsonb_array_elements(parts) p) as text, metadata->>'trigger' as trigger
        from messages where thread_id = ${threadId} and role = 'assistant' order by created_at`);
    expect(order.map((m) => m.trigger)).toEqual([null, null, "children_settled"]);
    expect(order[1]!.text).toContain("Think slowly");
    expect(await wakeMessages(threadId)).toHaveLength(1);
  }, 120_000);

  it("Stop of the response's lead run after it ended stops its background children, running and waiting", async () => {
    const stopSweeps = startBackgroundSweeps({ db: t.db });
    try {
      const threadId = (await createThread(t.db, { userId: alice.id })).id;
      // Four items at the default concurrency of 3: one waits in the scheduler, its row pending.
      const chunks = await send(threadId, "background swarm: Long work on {{item}} [[sleep:30000]] | a; b; c; d");
      const { runIds, leadRunId } = receiptOf(chunks);
      expect(runIds).toHaveLength(4);
      await waitFor("three running", async () => (await statuses(runIds)).filter((r) => r.status === "running").length === 3);

      const res = await stop(
        request(`/api/threads/${threadId}/runs/${leadRunId}/stop`, { method: "POST", cookie }),
        params({ threadId, runId: leadRunId }),
      );
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ stopped: 4, failed_to_stop: 0 });
      await waitFor("all cancelled", async () => (await statuses(runIds)).every((r) => r.status === "cancelled"), 10_000);
      await waitFor("job ended", async () => backgroundJobCount() === 0, 10_000);
      // The call settled (cancelled): the lead would be woken with that.
      await waitFor("settled", async () => {
        const [row] = await t.db.execute<{ settled_at: Date | null }>(sql`select settled_at from child_wakeups where thread_id = ${threadId}`);
        return row?.settled_at;
      });
    } finally {
      stopSweeps();
    }
  }, 60_000);

  it("a process that dies with background children running: they end interrupted and the lead wakes once", async () => {
    const threadId = (await createThread(t.db, { userId: alice.id })).id;
    const doomed = workers.spawnScript("test/chat/fixtures/background-lead.ts", [alice.id, threadId, "background task: a long job [[sleep:60000]]"]);
    const [row] = await waitFor("background call running", async () => {
      const rows = await t.db.execute<{ run_ids: string[]; owner_instance: string }>(
        sql`select run_ids::text[] as run_ids, owner_instance from child_wakeups where thread_id = ${threadId}`,
      );
      return rows.length && (await statuses(rows[0]!.run_ids))[0]?.status === "running" ? rows : undefined;
    });
    await workers.killAll([doomed]);
    workers.spawnWebRunner("web-after-a");
    workers.spawnWebRunner("web-after-b");
    // The clock starts when a new process runs (its first query), not at the kill: booting a
    // process under a loaded CI took half a minute on its own.
    await waitFor("a new web process running", async () => {
      const [r] = await t.db.execute<{ n: number }>(sql`
        select count(*)::int as n from pg_stat_activity
         where datname = current_database() and application_name = 'flotilla-test-web-runner'`);
      return (r?.n ?? 0) > 0;
    }, 120_000);
    const startedAt = Date.now();
    await waitFor("wake-up after the restart", async () => (await wakeRows(threadId))[0]?.done_at, 90_000);
    // Within a minute of the new processes starting (the owner's heartbeat must first go silent).
    expect(Date.now() - startedAt).toBeLessThan(60_000);
    expect((await statuses(row!.run_ids)).map((r) => r.status)).toEqual(["interrupted"]);
    const msgs = await wakeMessages(threadId);
    expect(msgs).toHaveLength(1);
    expect(msgs[0]!.metadata).toMatchObject({ trigger: "children_settled", run_ids: row!.run_ids });
    expect(msgs[0]!.text).toContain("The background task was interrupted by a server restart");
    expect((await wakeRows(threadId))[0]).toMatchObject({ interrupted: true, attempts: 1 });
    await new Promise((r) => setTimeout(r, 1_500));
    expect(await wakeMessages(threadId)).toHaveLength(1);
  }, 240_000);
});
