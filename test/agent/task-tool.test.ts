import { generateText, stepCountIs, type UIMessageStreamWriter } from "ai";
import { beforeAll, describe, expect, it } from "vitest";
import { effectiveTaskConcurrency } from "@/lib/config";
import { buildLeadSystemPrompt } from "@/server/agent/lead";
import { createRun } from "@/server/agent/runs";
import { createTaskTool, delegationPromptSection, type SubagentDataPart, type TaskToolOutput } from "@/server/agent/tools/task";
import type { SubagentRuntime } from "@/server/runtime/admission";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { childRows, type ModelCall, recordingSimulator, runtimeFor, testConfig, userAndThread } from "./support";

let database: TestDatabase;
let ids: { userId: string; threadId: string };

beforeAll(async () => {
  database = await createTestDatabase();
  ids = await userAndThread(database.db, "task");
});

function captureWriter() {
  const parts: Array<{ type: string; id?: string; data?: SubagentDataPart }> = [];
  const writer = {
    write: (part: (typeof parts)[number]) => parts.push(part),
    merge: () => {},
    onError: undefined,
  } as unknown as UIMessageStreamWriter;
  return { parts, writer };
}

/** A lead run driven by the simulator: `task:` lines in the prompt become parallel task calls. */
async function lead(runtime: SubagentRuntime) {
  const config = runtime.config;
  const run = await createRun(database.db, { ...ids, kind: "lead", definition: "lead", model: "simulator", status: "running" });
  const model = recordingSimulator();
  const { parts, writer } = captureWriter();
  const controller = new AbortController();
  const task = createTaskTool({
    db: database.db,
    config,
    ...ids,
    runId: run.id,
    model,
    abortSignal: controller.signal,
    writer,
    runtime,
  });
  const respond = (prompt: string) =>
    generateText({
      model: model.model,
      messages: [{ role: "user", content: prompt }],
      tools: { task },
      stopWhen: stepCountIs(3),
      abortSignal: controller.signal,
    });
  return { run, model, parts, respond, controller };
}

const outputs = (result: { steps: Array<{ toolResults: Array<{ output: unknown }> }> }) =>
  result.steps[0].toolResults.map((r) => r.output as TaskToolOutput);

describe("task tool", () => {
  it("runs up to the effective concurrency per response and tells the model which calls were dropped", async () => {
    const runtime = runtimeFor({ FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "10", FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "3" });
    expect(effectiveTaskConcurrency(runtime.config)).toBe(3);
    const l = await lead(runtime);
    const result = await l.respond(["task: one", "task: two", "task: three", "task: four", "task: five"].join("\n"));
    const out = outputs(result);
    expect(out.map((o) => o.status)).toEqual(["completed", "completed", "completed", "not_run", "not_run"]);
    expect(out[3].notRunReason).toBe("response_limit");
    expect(out[3].error).toMatch(/limit of 3 per response/);
    expect(out[3].error).toMatch(/call 4/);
    expect(out[4].error).toMatch(/call 5/);
    expect(out[4].error).toMatch(/"one", "two", "three"/);
    // Exactly three runs exist, and the model saw the explanation in the tool results.
    expect(await childRows(database.db, l.run.id)).toHaveLength(3);
    expect(result.text).toMatch(/was not run/);
  });

  it("states the same resolved number in the lead prompt as it enforces", async () => {
    const config = testConfig({ FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "10", FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2" });
    const section = delegationPromptSection(config);
    expect(section).toMatch(/At most 2 `task` calls per response/);
    expect(section).toMatch(/At most 6 tasks in total/);
    expect(section).toMatch(/- general: /);
    expect(buildLeadSystemPrompt(config, ["task"])).toContain(section);
    const l = await lead(runtimeFor({ FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "10", FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2" }));
    const out = outputs(await l.respond("task: a\ntask: b\ntask: c"));
    expect(out.map((o) => o.status)).toEqual(["completed", "completed", "not_run"]);
  });

  it("stops runaway delegation at max_total_per_run with a clear message", async () => {
    const runtime = runtimeFor({ FLOTILLA__SUBAGENTS__MAX_TOTAL_PER_RUN: "4" });
    const l = await lead(runtime);
    const first = outputs(await l.respond("task: a1\ntask: a2\ntask: a3"));
    expect(first.map((o) => o.status)).toEqual(["completed", "completed", "completed"]);
    // A later response of the same lead run: only one more may run.
    const second = outputs(await l.respond("task: b1\ntask: b2\ntask: b3"));
    expect(second.map((o) => o.status)).toEqual(["completed", "not_run", "not_run"]);
    expect(second[1].notRunReason).toBe("run_total");
    expect(second[1].error).toMatch(/limit of 4 delegated tasks per run \(subagents\.max_total_per_run\)/);
    expect(await childRows(database.db, l.run.id)).toHaveLength(4);
  });

  it("writes live data-subagent parts (id = run id) through pending, running and the final status", async () => {
    const runtime = runtimeFor();
    const l = await lead(runtime);
    const result = await l.respond("task: report on X\ntask: report on Y");
    const out = outputs(result);
    const calls = result.steps[0].toolCalls.map((c) => c.toolCallId);
    for (const [i, o] of out.entries()) {
      expect(o).toMatchObject({ status: "completed", definition: "general", model: "simulator" });
      expect(o.runId).toMatch(/^[0-9a-f-]{36}$/);
      expect(o.durationMs).toBeGreaterThan(0);
      expect(o.usage.outputTokens).toBeGreaterThan(0);
      const mine = l.parts.filter((p) => p.id === o.runId);
      expect(mine.every((p) => p.type === "data-subagent" && p.data?.toolCallId === calls[i])).toBe(true);
      const statuses = mine.map((p) => p.data?.status);
      expect(statuses[0]).toBe("pending");
      expect(statuses).toContain("running");
      expect(statuses.at(-1)).toBe("completed");
      expect(mine.at(-1)?.data).toMatchObject({ runId: o.runId, usage: o.usage, description: expect.any(String) });
    }
  });

  it("reports an unknown sub-agent to the model without running anything", async () => {
    const runtime = runtimeFor();
    const l = await lead(runtime);
    const result = await l.respond('[[call:task {"subagent":"wizard","description":"magic","prompt":"do magic"}]]');
    const [o] = outputs(result);
    expect(o).toMatchObject({ status: "not_run", notRunReason: "invalid" });
    expect(o.error).toMatch(/Unknown sub-agent "wizard". Available: general, researcher, summarizer/);
    expect(await childRows(database.db, l.run.id)).toHaveLength(0);
  });

  it("turns a capacity refusal into a failed result the model can read", async () => {
    const runtime = runtimeFor({
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1",
      FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY: "reject",
    });
    const hold = await runtime.capacity.acquire();
    const l = await lead(runtime);
    const [o] = outputs(await l.respond("task: refused"));
    hold();
    expect(o).toMatchObject({ status: "failed", stopReason: "capacity_rejected", notRunReason: "capacity" });
    expect(o.error).toMatch(/admission policy is "reject"/);
    expect(o.runId).not.toBeNull();
  });
});

describe("per-thread isolation", () => {
  it("a thread at max_per_thread queues its own children while another thread's child runs", async () => {
    const runtime = runtimeFor({ FLOTILLA__SUBAGENTS__MAX_PER_THREAD: "1", FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" });
    const other = await userAndThread(database.db, "other");
    const a = await lead(runtime);
    // Both are long: whichever reaches admission first runs, the other waits in thread A's lane.
    const busy = a.respond("task: slow A1 [[sleep:30000]]\ntask: slow A2 [[sleep:30000]]").catch((e: unknown) => e);
    for (let i = 0; i < 500 && runtime.threadLanes.stats(ids.threadId).queued < 1; i++) await new Promise((r) => setTimeout(r, 10));
    expect(runtime.threadLanes.stats(ids.threadId)).toEqual({ running: 1, queued: 1 });

    const runB = await createRun(database.db, { ...other, kind: "lead", definition: "lead", model: "simulator", status: "running" });
    const model = recordingSimulator();
    const taskB = createTaskTool({
      db: database.db,
      config: runtime.config,
      ...other,
      runId: runB.id,
      model,
      abortSignal: new AbortController().signal,
      runtime,
    });
    const b = await generateText({ model: model.model, prompt: "task: B1", tools: { task: taskB }, stopWhen: stepCountIs(2) });
    expect((b.steps[0].toolResults[0].output as TaskToolOutput).status).toBe("completed");
    // Thread B's child finished while one of thread A's children is still pending (never started).
    const aRows = await childRows(database.db, a.run.id);
    expect(aRows.map((r) => r.status).sort()).toEqual(["pending", "running"]);
    expect(runtime.threadLanes.stats(ids.threadId)).toEqual({ running: 1, queued: 1 });

    a.controller.abort(new Error("done with this test"));
    await busy;
    expect((await childRows(database.db, a.run.id)).map((r) => r.status)).toEqual(["cancelled", "cancelled"]);
    expect(runtime.threadLanes.size).toBe(0);
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});

describe("nested delegation", () => {
  const offered = (calls: ModelCall[], text: string) => calls.find((c) => c.userText === text)?.tools ?? [];

  it("with max_depth 2 a child gets only `task`, and its own children get no delegation tools", async () => {
    const runtime = runtimeFor({ FLOTILLA__SUBAGENTS__MAX_DEPTH: "2", FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" });
    const l = await lead(runtime);
    const [o] = outputs(await l.respond("task: task: grandchild work"));
    expect(o.status).toBe("completed");
    expect(offered(l.model.calls, "task: grandchild work")).toEqual(["count_text", "current_time", "task"]);
    expect(offered(l.model.calls, "grandchild work")).toEqual(["count_text", "current_time"]);
    const [child] = await childRows(database.db, l.run.id);
    const [grandchild] = await childRows(database.db, child.id);
    expect(grandchild).toMatchObject({ depth: 2, rootRunId: l.run.id, status: "completed", kind: "task" });
    expect(o.result).toMatch(/^The general sub-agent finished: /);
  });

  it("does not deadlock when every process slot is held by parents waiting on children", async () => {
    const runtime = runtimeFor({
      FLOTILLA__SUBAGENTS__MAX_DEPTH: "3",
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2",
      FLOTILLA__SUBAGENT_RUNTIME__QUEUE_TIMEOUT_SECONDS: "300",
    });
    const l = await lead(runtime);
    const t0 = Date.now();
    // Two parents take both slots; each asks for a child (which would ask for another).
    const out = outputs(await l.respond("task: task: task: leaf A\ntask: task: task: leaf B"));
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(out.map((o) => o.status)).toEqual(["completed", "completed"]);
    for (const parent of await childRows(database.db, l.run.id)) {
      expect(parent.status).toBe("completed");
      const kids = await childRows(database.db, parent.id);
      expect(kids).toHaveLength(1);
      expect(kids[0]).toMatchObject({ status: "failed", stopReason: "capacity_rejected", startedAt: null });
      expect(kids[0].error).toMatch(/cannot wait because its caller already holds a slot/);
      // The parent's model read the refusal and answered anyway.
      expect(parent.result).toMatch(/sub-agent failed: .*cannot wait/);
    }
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("rejects at once beyond max_active_per_root with an actionable message, though process slots are free", async () => {
    const runtime = runtimeFor({
      FLOTILLA__SUBAGENTS__MAX_DEPTH: "2",
      FLOTILLA__SUBAGENTS__MAX_ACTIVE_PER_ROOT: "2",
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "8",
    });
    const l = await lead(runtime);
    const out = outputs(await l.respond("task: task: leaf one\ntask: task: leaf two"));
    expect(out.map((o) => o.status)).toEqual(["completed", "completed"]);
    for (const parent of await childRows(database.db, l.run.id)) {
      const [kid] = await childRows(database.db, parent.id);
      expect(kid).toMatchObject({ status: "failed", stopReason: "capacity_rejected" });
      expect(kid.error).toMatch(/max_active_per_root = 2/);
    }
    expect(runtime.rootPools.size).toBe(0);
  });
});
