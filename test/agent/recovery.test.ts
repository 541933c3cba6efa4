import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { INTERRUPTED_MESSAGE, recoverInterruptedRuns } from "@/server/agent/runs";
import { agentRuns, workerHeartbeats } from "@/server/db/schema";
import { insertMessage, loadMessages } from "@/server/chat/messages";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { noteInterruptedRuns } from "@/server/startup";
import { useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { runRow, userAndThread } from "./support";

let database: TestDatabase;
let ids: { userId: string; threadId: string };

beforeAll(async () => {
  database = await createTestDatabase();
  useSuiteEnv(database.url);
  ids = await userAndThread(database.db, "recovery");
});

const earlier = new Date(Date.now() - 60_000);

async function row(values: Partial<typeof agentRuns.$inferInsert>) {
  const [r] = await database.db
    .insert(agentRuns)
    .values({ ...ids, kind: "task", definition: "general", model: "simulator", createdAt: earlier, ...values })
    .returning();
  return r;
}

describe("restart recovery", () => {
  it("finalizes runs a gone process left active as interrupted, and only those", async () => {
    const dead = "old-host:42:dead00";
    const lead = await row({ kind: "lead", definition: "lead", status: "running", ownerInstance: dead, startedAt: earlier });
    const child = await row({ status: "running", ownerInstance: dead, parentRunId: lead.id, startedAt: earlier });
    const queued = await row({ status: "pending", ownerInstance: dead, parentRunId: lead.id });
    const swarmChild = await row({ kind: "swarm_child", status: "running", ownerInstance: null });
    // Left alone: this process's own run, a run created after start, a live owner's run,
    // durable batch items (lease recovery) and finished runs.
    const mine = await row({ status: "running", ownerInstance: INSTANCE_ID });
    const fresh = await row({ status: "running", ownerInstance: dead, createdAt: new Date(Date.now() + 60_000) });
    const liveOwner = "busy-host:7:live00";
    await database.db.insert(workerHeartbeats).values({ id: liveOwner, kind: "web", host: "busy-host", pid: 7, version: "t", capacity: 3 });
    const alive = await row({ status: "running", ownerInstance: liveOwner });
    const batch = await row({ kind: "batch_item", status: "running", ownerInstance: dead });
    const done = await row({ status: "completed", ownerInstance: dead, result: "kept" });

    const { interrupted } = await recoverInterruptedRuns(database.db, { startedBefore: new Date() });
    expect(interrupted.sort()).toEqual([lead.id, child.id, queued.id, swarmChild.id].sort());
    for (const id of interrupted) {
      const r = await runRow(database.db, id);
      expect(r).toMatchObject({ status: "interrupted", stopReason: "interrupted", error: INTERRUPTED_MESSAGE });
      expect(r.finishedAt).not.toBeNull();
    }
    expect(INTERRUPTED_MESSAGE).toMatch(/not restarted automatically/);
    for (const r of [mine, fresh, alive, batch]) expect((await runRow(database.db, r.id)).status).toBe("running");
    expect(await runRow(database.db, done.id)).toMatchObject({ status: "completed", result: "kept" });

    // Idempotent: a second pass finds nothing more.
    expect((await recoverInterruptedRuns(database.db, { startedBefore: new Date() })).interrupted).toEqual([]);
  });

  it("runs at web start through instrumentation register() (Node.js runtime only) and tells the thread", async () => {
    const crashed = await userAndThread(database.db, "crashed");
    const lead = await row({ ...crashed, kind: "lead", definition: "lead", status: "running", ownerInstance: "crashed-host:1:aaaaaa" });
    const orphan = await row({
      ...crashed,
      status: "running",
      ownerInstance: "crashed-host:1:aaaaaa",
      parentRunId: lead.id,
      rootRunId: lead.id,
      prompt: "Research the harbour tides",
    });
    const { register } = await import("@/instrumentation");
    process.env.NEXT_RUNTIME = "edge";
    await register();
    expect((await runRow(database.db, orphan.id)).status).toBe("running");
    process.env.NEXT_RUNTIME = "nodejs";
    await register();
    expect((await runRow(database.db, orphan.id)).status).toBe("interrupted");
    const [{ n }] = await database.db.execute<{ n: number }>(
      sql`select count(*)::int as n from agent_runs where status in ('pending','running') and owner_instance = 'crashed-host:1:aaaaaa'`,
    );
    expect(n).toBe(0);

    // The reply was never stored, so the thread gets one note saying what was interrupted.
    const notes = await loadMessages(database.db, { threadId: crashed.threadId });
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatchObject({ role: "assistant", metadata: { runId: lead.id, status: "failed" } });
    const text = notes[0].parts.map((p) => (p.type === "text" ? p.text : "")).join("");
    expect(text).toMatch(/interrupted by a server restart/);
    expect(text).toMatch(/1 sub-agent run was stopped as interrupted and not restarted/);
    expect(text).toMatch(/needs checking/);
    expect(text).toContain("- general: Research the harbour tides");
    // A second start adds nothing.
    await register();
    expect(await loadMessages(database.db, { threadId: crashed.threadId })).toHaveLength(1);

    // The web process heartbeats (kind "web"), so a second web process starting later leaves
    // this one's in-flight runs alone instead of finalizing them as interrupted.
    const [beat] = await database.db.execute<{ kind: string }>(
      sql`select kind from worker_heartbeats where id = ${INSTANCE_ID} and stopped_at is null`,
    );
    expect(beat).toEqual({ kind: "web" });
    const inFlight = await row({ ...crashed, status: "running", ownerInstance: INSTANCE_ID });
    const otherWebProcess = await recoverInterruptedRuns(database.db, { instanceId: "other-web:2:bbbbbb", startedBefore: new Date() });
    expect(otherWebProcess.interrupted).not.toContain(inFlight.id);
  });

  it("adds no note when the interrupted response's reply was stored (its cards show the status)", async () => {
    const t = await userAndThread(database.db, "stored");
    const lead = await row({ ...t, kind: "lead", definition: "lead", status: "interrupted", ownerInstance: "x" });
    await insertMessage(database.db, {
      threadId: t.threadId,
      message: { id: `m_${lead.id}`, role: "assistant", parts: [{ type: "text", text: "partial" }], metadata: { runId: lead.id } },
    });
    expect(await noteInterruptedRuns(database.db, [lead.id])).toBe(0);
    expect(await loadMessages(database.db, { threadId: t.threadId })).toHaveLength(1);
  });
});
