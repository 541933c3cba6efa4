import { randomUUID } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { runSubagent } from "@/server/agent/executor";
import { getSubagentDefinition, resolveSubagent } from "@/server/agent/registry";
import { createRun, insertFinishedRun } from "@/server/agent/runs";
import { CapacityRejectedError, CapacityTimeoutError } from "@/server/runtime/capacity";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { recordingSimulator, runRow, runtimeFor, testConfig, userAndThread, waitFor } from "./support";

let database: TestDatabase;
let ids: { userId: string; threadId: string };

beforeAll(async () => {
  database = await createTestDatabase();
  ids = await userAndThread(database.db);
});

async function leadRun() {
  return createRun(database.db, { ...ids, kind: "lead", definition: "lead", model: "simulator", status: "running" });
}

describe("runSubagent", () => {
  it("runs a sub-agent to completion and records the whole run row", async () => {
    const lead = await leadRun();
    const model = recordingSimulator();
    const statuses: string[] = [];
    const result = await runSubagent(database.db, {
      ...ids,
      parentRunId: lead.id,
      kind: "task",
      definition: getSubagentDefinition("researcher", testConfig()),
      prompt: "Compare two sorting algorithms.",
      model,
      signal: new AbortController().signal,
      toolCallId: "call_1",
      runtime: runtimeFor(),
      onStatus: (u) => statuses.push(u.status),
    });
    expect(result).toMatchObject({ status: "completed", model: "simulator", definition: "researcher", stopReason: "stop" });
    expect(result.text).toMatch(/Simulated answer to "Compare two sorting algorithms\."/);
    expect(result.usage.inputTokens).toBeGreaterThan(0);
    expect(result.usage.outputTokens).toBeGreaterThan(0);
    expect(statuses[0]).toBe("pending");
    expect(statuses).toContain("running");
    expect(statuses.at(-1)).toBe("completed");

    const row = await runRow(database.db, result.runId);
    expect(row).toMatchObject({
      status: "completed",
      kind: "task",
      definition: "researcher",
      model: "simulator",
      parentRunId: lead.id,
      rootRunId: lead.id,
      threadId: ids.threadId,
      userId: ids.userId,
      toolCallId: "call_1",
      depth: 1,
      stopReason: "stop",
      prompt: "Compare two sorting algorithms.",
      result: result.text,
      inputTokens: result.usage.inputTokens,
      outputTokens: result.usage.outputTokens,
      error: null,
    });
    expect(row.startedAt).not.toBeNull();
    expect(row.finishedAt!.getTime()).toBeGreaterThanOrEqual(row.startedAt!.getTime());
    // The transcript replays the run: the user prompt, then the model's messages.
    const transcript = row.transcript as Array<{ role: string }>;
    expect(transcript[0]).toEqual({ role: "user", content: "Compare two sorting algorithms." });
    expect(transcript.at(-1)?.role).toBe("assistant");
  });

  it("gives sub-agents no delegation tools unless nesting is configured", async () => {
    const model = recordingSimulator();
    const result = await runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("general", testConfig()),
      prompt: "task: try to delegate this\n[[call:agent_swarm {}]]\n[[call:batch_task {}]]",
      model,
      signal: new AbortController().signal,
      runtime: runtimeFor(),
    });
    expect(result.status).toBe("completed");
    expect(model.calls).toHaveLength(1);
    expect(model.calls[0].tools).toEqual(["count_text", "current_time"]);
    for (const name of ["task", "agent_swarm", "batch_task", "batch_status"]) expect(model.calls[0].tools).not.toContain(name);
  });

  it("stays pending until it really holds a slot; onStarted runs once, after the row is running", async () => {
    const runtime = runtimeFor({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1" });
    const hold = await runtime.capacity.acquire();
    let runId = "";
    const seen: string[] = [];
    const done = runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("general", runtime.config),
      prompt: "waits for a slot",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime,
      onCreated: (id) => {
        runId = id;
      },
      onStarted: async () => {
        seen.push((await runRow(database.db, runId)).status);
      },
    });
    await waitFor(() => runtime.capacity.stats().queued === 1);
    const pending = await runRow(database.db, runId);
    expect(pending.status).toBe("pending");
    expect(pending.startedAt).toBeNull();
    expect(seen).toEqual([]);
    hold();
    const result = await done;
    expect(result.status).toBe("completed");
    expect(seen).toEqual(["running"]);
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("records a model failure as failed with its class and releases the slot", async () => {
    const runtime = runtimeFor();
    const result = await runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("general", runtime.config),
      prompt: "this breaks [[fail]]",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime,
    });
    expect(result).toMatchObject({ status: "failed", stopReason: "error", errorClass: "provider" });
    expect(result.error).toMatch(/Simulated model failure/);
    const row = await runRow(database.db, result.runId);
    expect(row).toMatchObject({ status: "failed", stopReason: "error" });
    expect(row.error).toMatch(/Simulated model failure/);
    expect(row.finishedAt).not.toBeNull();
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("honours the definition's time limit: timed_out, promptly, slot released", async () => {
    const runtime = runtimeFor({
      FLOTILLA__SUBAGENTS__DEFINITIONS: JSON.stringify([
        { name: "quick", description: "one-second limit", system_prompt: "Be quick.", timeout_seconds: 1 },
      ]),
    });
    const started = Date.now();
    const result = await runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("quick", runtime.config),
      prompt: "slow [[sleep:5000]]",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime,
    });
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(result).toMatchObject({ status: "timed_out", stopReason: "timeout" });
    expect(result.error).toMatch(/time limit of 1s/);
    expect((await runRow(database.db, result.runId)).status).toBe("timed_out");
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("is cancelled promptly when its signal aborts while running", async () => {
    const runtime = runtimeFor();
    const ac = new AbortController();
    let runId = "";
    const done = runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("general", runtime.config),
      prompt: "long [[sleep:10000]]",
      model: recordingSimulator(),
      signal: ac.signal,
      runtime,
      onCreated: (id) => {
        runId = id;
      },
    });
    await waitFor(async () => runId && (await runRow(database.db, runId)).status === "running");
    const t0 = Date.now();
    ac.abort(new Error("user went away"));
    const result = await done;
    expect(Date.now() - t0).toBeLessThan(1_000);
    expect(result).toMatchObject({ status: "cancelled", stopReason: "cancelled", error: "user went away" });
    expect((await runRow(database.db, runId)).status).toBe("cancelled");
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("abort while queued cancels without ever starting and leaves no waiter", async () => {
    const runtime = runtimeFor({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1" });
    const hold = await runtime.capacity.acquire();
    const ac = new AbortController();
    let started = false;
    const done = runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("general", runtime.config),
      prompt: "never runs",
      model: recordingSimulator(),
      signal: ac.signal,
      runtime,
      onStarted: () => {
        started = true;
      },
    });
    await waitFor(() => runtime.capacity.stats().queued === 1);
    ac.abort(new Error("stop while queued"));
    const result = await done;
    expect(result.status).toBe("cancelled");
    expect(started).toBe(false);
    const row = await runRow(database.db, result.runId);
    expect(row.status).toBe("cancelled");
    expect(row.startedAt).toBeNull();
    expect(runtime.capacity.stats()).toMatchObject({ running: 1, queued: 0 });
    hold();
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("a batch item writes its run row once, at the end (none while it runs), with its tool calls", async () => {
    let runId = "";
    let rowWhileRunning: unknown = "unset";
    const plain = await runSubagent(database.db, {
      ...ids,
      kind: "batch_item",
      definition: getSubagentDefinition("general", testConfig()),
      prompt: "no tools",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime: runtimeFor(),
      onCreated: (id) => {
        runId = id;
      },
      onStarted: async () => {
        rowWhileRunning = await runRow(database.db, runId);
      },
    });
    expect(rowWhileRunning).toBeUndefined();
    expect(plain.runId).toBe(runId);
    const row = await runRow(database.db, runId);
    expect(row).toMatchObject({ status: "completed", kind: "batch_item", prompt: "no tools", result: plain.text, toolCallCount: 0 });
    expect(row.createdAt.getTime()).toBeLessThanOrEqual(row.startedAt!.getTime());
    expect(row.startedAt!.getTime()).toBeLessThanOrEqual(row.finishedAt!.getTime());

    // test/workspace/tool.test.ts proves the row exists before a tool references it (write_file).
    const withTool = await runSubagent(database.db, {
      ...ids,
      kind: "batch_item",
      definition: getSubagentDefinition("general", testConfig()),
      prompt: "[[call:current_time {}]]",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime: runtimeFor(),
    });
    expect(withTool.status).toBe("completed");
    expect(await runRow(database.db, withTool.runId)).toMatchObject({ status: "completed", toolCallCount: 1 });
  });

  it("batch-item run rows ending in the same tick are written together, and a bad one fails alone", async () => {
    const row = (id: string, userId: string) => ({
      id,
      userId,
      kind: "batch_item" as const,
      definition: "general",
      model: "simulator",
      createdAt: new Date(),
      startedAt: new Date(),
      status: "completed" as const,
      usage: { inputTokens: 1, outputTokens: 1 },
    });
    const [good, bad, alsoGood] = [randomUUID(), randomUUID(), randomUUID()];
    const results = await Promise.allSettled([
      insertFinishedRun(database.db, row(good, ids.userId)),
      insertFinishedRun(database.db, row(bad, randomUUID())), // no such user: a foreign key violation
      insertFinishedRun(database.db, row(alsoGood, ids.userId)),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect(await runRow(database.db, good)).toMatchObject({ status: "completed", kind: "batch_item" });
    expect(await runRow(database.db, alsoGood)).toMatchObject({ status: "completed" });
    expect(await runRow(database.db, bad)).toBeUndefined();
  });

  it("throws CapacityRejectedError before execution when refused, with the row failed", async () => {
    const runtime = runtimeFor({
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1",
      FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY: "reject",
    });
    const hold = await runtime.capacity.acquire();
    let runId = "";
    let started = false;
    const err = await runSubagent(database.db, {
      ...ids,
      kind: "batch_item",
      definition: getSubagentDefinition("general", runtime.config),
      prompt: "refused",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime,
      onCreated: (id) => {
        runId = id;
      },
      onStarted: () => {
        started = true;
      },
    }).catch((e) => e);
    expect(err).toBeInstanceOf(CapacityRejectedError);
    expect(started).toBe(false);
    expect(await runRow(database.db, runId)).toMatchObject({ status: "failed", stopReason: "capacity_rejected", startedAt: null });
    hold();
  });

  it("throws CapacityTimeoutError when the queue wait runs out", async () => {
    const runtime = runtimeFor({
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1",
      FLOTILLA__SUBAGENT_RUNTIME__QUEUE_TIMEOUT_SECONDS: "1",
    });
    const hold = await runtime.capacity.acquire();
    let runId = "";
    const err = await runSubagent(database.db, {
      ...ids,
      kind: "task",
      definition: getSubagentDefinition("general", runtime.config),
      prompt: "times out in the queue",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime,
      onCreated: (id) => {
        runId = id;
      },
    }).catch((e) => e);
    expect(err).toBeInstanceOf(CapacityTimeoutError);
    expect(err.message).toMatch(/subagent_runtime\.queue_timeout_seconds/);
    expect(await runRow(database.db, runId)).toMatchObject({ status: "failed", stopReason: "capacity_timeout" });
    hold();
    expect(runtime.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("uses the process capacity passed as `capacity` (shared with batch items and swarms)", async () => {
    const runtime = runtimeFor();
    const shared = runtimeFor({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1" }).capacity;
    const hold = await shared.acquire();
    const done = runSubagent(database.db, {
      ...ids,
      kind: "swarm_child",
      definition: getSubagentDefinition("summarizer", runtime.config),
      prompt: "shared slot",
      model: recordingSimulator(),
      signal: new AbortController().signal,
      runtime,
      capacity: shared,
    });
    await waitFor(() => shared.stats().queued === 1);
    expect(runtime.capacity.stats().queued).toBe(0);
    hold();
    expect((await done).status).toBe("completed");
  });

  it("rejects an unknown definition before writing anything", async () => {
    // Names are resolved at the edges (task, swarm, compatible executor), before any run exists.
    expect(() => resolveSubagent(runtimeFor().config, "nope", recordingSimulator())).toThrow(
      /unknown sub-agent "nope" \(available: general, researcher, summarizer, data\)/,
    );
  });
});
