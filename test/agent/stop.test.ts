import { generateText, stepCountIs } from "ai";
import { eq } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { createRun, stopRunTree } from "@/server/agent/runs";
import { createTaskTool, type TaskToolOutput } from "@/server/agent/tools/task";
import { agentRuns } from "@/server/db/schema";
import { registerLiveRun } from "@/server/runtime/run-registry";
import { params, request, sessionCookie, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { childRows, recordingSimulator, runRow, runtimeFor, userAndThread, waitFor } from "./support";

let database: TestDatabase;

beforeAll(async () => {
  database = await createTestDatabase();
  useSuiteEnv(database.url);
});

/**
 * A live lead run like the chat's: its row, its controller in the run registry, and a
 * simulator response whose `task:` lines become sub-agents under the given runtime.
 */
async function liveLead(ids: { userId: string; threadId: string }, runtime = runtimeFor()) {
  const run = await createRun(database.db, { ...ids, kind: "lead", definition: "lead", model: "simulator", status: "running" });
  const controller = new AbortController();
  const unregister = registerLiveRun(run.id, controller);
  const model = recordingSimulator();
  const task = createTaskTool({ db: database.db, config: runtime.config, ...ids, runId: run.id, model, abortSignal: controller.signal, runtime });
  const respond = (prompt: string) =>
    generateText({
      model: model.model,
      prompt,
      tools: { task },
      stopWhen: stepCountIs(2),
      abortSignal: controller.signal,
    }).finally(unregister);
  return { run, controller, respond, runtime };
}

/** Inserts a row directly, as another process would have. */
async function foreignRow(values: Partial<typeof agentRuns.$inferInsert> & { userId: string }) {
  const [row] = await database.db
    .insert(agentRuns)
    .values({ kind: "task", definition: "general", model: "simulator", ownerInstance: "other-host:1:abc", ...values })
    .returning();
  return row;
}

describe("stop cascade", () => {
  it("stops running and queued descendants, cancels orphan pending rows, and reports what it could not stop", async () => {
    const ids = await userAndThread(database.db, "stop");
    const runtime = runtimeFor({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "3" });
    // One slot is busy elsewhere in the process, so of three tasks two run and one waits.
    const elsewhere = await runtime.capacity.acquire();
    const lead = await liveLead(ids, runtime);
    const response = lead.respond("task: one [[sleep:20000]]\ntask: two [[sleep:20000]]\ntask: three [[sleep:20000]]");
    const settled = response.then(
      (r) => r,
      (e) => e,
    );
    await waitFor(async () => {
      const rows = await childRows(database.db, lead.run.id);
      return rows.filter((r) => r.status === "running").length === 2 && rows.some((r) => r.status === "pending");
    });
    // Rows this process does not own: one not started (cancellable in the database), one running elsewhere.
    const orphanPending = await foreignRow({ ...ids, parentRunId: lead.run.id, rootRunId: lead.run.id, status: "pending" });
    const runningElsewhere = await foreignRow({ ...ids, parentRunId: lead.run.id, rootRunId: lead.run.id, status: "running" });
    // Never touched: a durable batch item under the lead, a finished child, and another thread's run.
    const batchItem = await foreignRow({ ...ids, kind: "batch_item", parentRunId: lead.run.id, status: "running" });
    const finished = await foreignRow({ ...ids, parentRunId: lead.run.id, status: "completed" });
    const other = await userAndThread(database.db, "bystander");
    const otherRun = await foreignRow({ ...other, status: "running", ownerInstance: null });

    const t0 = Date.now();
    const report = await stopRunTree(database.db, { ...ids, runId: lead.run.id });
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(report).toEqual({ stopped: 4, failedToStop: 1, runAborted: true });

    const rows = await childRows(database.db, lead.run.id);
    const ours = rows.filter((r) => r.ownerInstance !== "other-host:1:abc");
    expect(ours).toHaveLength(3);
    expect(ours.every((r) => r.status === "cancelled" && r.stopReason === "stopped")).toBe(true);
    // The queued one never started.
    expect(ours.filter((r) => r.startedAt === null)).toHaveLength(1);
    expect(await runRow(database.db, orphanPending.id)).toMatchObject({ status: "cancelled", stopReason: "stopped" });
    expect((await runRow(database.db, runningElsewhere.id)).status).toBe("running");
    expect((await runRow(database.db, batchItem.id)).status).toBe("running");
    expect((await runRow(database.db, finished.id)).status).toBe("completed");
    expect((await runRow(database.db, otherRun.id)).status).toBe("running");

    await settled;
    elsewhere();
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("follows grandchildren too (nested delegation)", async () => {
    const ids = await userAndThread(database.db, "nested-stop");
    const runtime = runtimeFor({ FLOTILLA__SUBAGENTS__MAX_DEPTH: "2", FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" });
    const lead = await liveLead(ids, runtime);
    const done = lead.respond("task: task: deep [[sleep:20000]]").catch((e) => e);
    let grandchildId = "";
    await waitFor(async () => {
      const [child] = await childRows(database.db, lead.run.id);
      if (!child) return false;
      const [grandchild] = await childRows(database.db, child.id);
      grandchildId = grandchild?.id ?? "";
      return grandchild?.status === "running";
    });
    const report = await stopRunTree(database.db, { ...ids, runId: lead.run.id });
    expect(report).toMatchObject({ stopped: 2, failedToStop: 0 });
    expect((await runRow(database.db, grandchildId)).status).toBe("cancelled");
    await done;
  });

  it("is owner- and thread-scoped", async () => {
    const ids = await userAndThread(database.db, "owner");
    const stranger = await userAndThread(database.db, "stranger");
    const run = await createRun(database.db, { ...ids, kind: "lead", definition: "lead", model: "simulator", status: "running" });
    await expect(stopRunTree(database.db, { ...stranger, runId: run.id })).rejects.toMatchObject({ code: "not_found" });
    await expect(stopRunTree(database.db, { userId: ids.userId, threadId: stranger.threadId, runId: run.id })).rejects.toMatchObject({
      code: "not_found",
    });
  });
});

describe("POST /api/threads/{threadId}/runs/{runId}/stop", () => {
  it("stops the run tree and answers the counts; 401/404 for anyone else", async () => {
    const { POST } = await import("@/app/api/threads/[threadId]/runs/[runId]/stop/route");
    const ids = await userAndThread(database.db, "route");
    const [user] = await database.db.query.users.findMany({ where: (u, { eq: e }) => e(u.id, ids.userId) });
    const cookie = await sessionCookie({ id: user.id, email: user.email });
    const lead = await liveLead(ids);
    const done = lead.respond("task: x [[sleep:20000]]\ntask: y [[sleep:20000]]");
    const outcome = done.then(
      (r) => r,
      (e: unknown) => e,
    );
    await waitFor(async () => (await childRows(database.db, lead.run.id)).filter((r) => r.status === "running").length === 2);

    const path = `/api/threads/${ids.threadId}/runs/${lead.run.id}/stop`;
    const anonymous = await POST(request(path, { method: "POST" }), params({ threadId: ids.threadId, runId: lead.run.id }));
    expect(anonymous.status).toBe(401);

    const stranger = await userAndThread(database.db, "route-stranger");
    const [su] = await database.db.query.users.findMany({ where: (u, { eq: e }) => e(u.id, stranger.userId) });
    const strangerCookie = await sessionCookie({ id: su.id, email: su.email });
    const foreign = await POST(
      request(path, { method: "POST", cookie: strangerCookie }),
      params({ threadId: ids.threadId, runId: lead.run.id }),
    );
    expect(foreign.status).toBe(404);
    const malformed = await POST(
      request(`/api/threads/${ids.threadId}/runs/not-a-uuid/stop`, { method: "POST", cookie }),
      params({ threadId: ids.threadId, runId: "not-a-uuid" }),
    );
    expect(malformed.status).toBe(404);
    expect((await malformed.json()).error.code).toBe("not_found");
    // Nothing was stopped by the refused calls.
    expect((await childRows(database.db, lead.run.id)).every((r) => r.status === "running")).toBe(true);

    const res = await POST(request(path, { method: "POST", cookie }), params({ threadId: ids.threadId, runId: lead.run.id }));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ run_id: lead.run.id, stopped: 2, failed_to_stop: 0 });
    const result = await outcome;
    // The lead's own response was aborted by the stop.
    expect(result).toBeInstanceOf(Error);
    const rows = await database.db.select().from(agentRuns).where(eq(agentRuns.parentRunId, lead.run.id));
    expect(rows.map((r) => r.status)).toEqual(["cancelled", "cancelled"]);
    // The report stays readable with the run, for the transcript after a reload.
    const { GET } = await import("@/app/api/threads/[threadId]/runs/[runId]/route");
    const detail = await GET(
      request(`/api/threads/${ids.threadId}/runs/${lead.run.id}`, { cookie }),
      params({ threadId: ids.threadId, runId: lead.run.id }),
    );
    expect(await detail.json()).toMatchObject({ id: lead.run.id, kind: "lead", stop_report: { stopped: 2, failed_to_stop: 0 } });
  });

  it("lists the thread's runs as projections without prompts or results", async () => {
    const { GET } = await import("@/app/api/threads/[threadId]/runs/route");
    const ids = await userAndThread(database.db, "list");
    const [user] = await database.db.query.users.findMany({ where: (u, { eq: e }) => e(u.id, ids.userId) });
    const cookie = await sessionCookie({ id: user.id, email: user.email });
    const lead = await liveLead(ids);
    const result = await lead.respond("task: list me");
    const out = result.steps[0].toolResults[0].output as TaskToolOutput;
    const res = await GET(request(`/api/threads/${ids.threadId}/runs`, { cookie }), params({ threadId: ids.threadId }));
    expect(res.status).toBe(200);
    const body = await res.json();
    const child = body.runs.find((r: { id: string }) => r.id === out.runId);
    expect(child).toMatchObject({ kind: "task", status: "completed", definition: "general", parent_run_id: lead.run.id });
    expect(child.duration_ms).toBeGreaterThan(0);
    expect(child.usage.output_tokens).toBeGreaterThan(0);
    for (const hidden of ["prompt", "result", "transcript", "owner_instance"]) expect(child).not.toHaveProperty(hidden);
  });
});
