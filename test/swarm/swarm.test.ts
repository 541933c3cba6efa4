import { eq } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { runSwarm } from "@/server/agent/swarm/run";
import { createSwarmTool, swarmModelText } from "@/server/agent/tools/swarm";
import { agentRuns } from "@/server/db/schema";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { childRuns, eventsOf, harness, seedUserThread, swarmConfig } from "./support";

let t: TestDatabase;
let who: { userId: string; threadId: string };

beforeAll(async () => {
  t = await createTestDatabase();
  who = await seedUserThread(t.db);
});

const ROW_KEYS = [
  "attempts",
  "child_run_id",
  "duration_ms",
  "error",
  "failure_class",
  "item_id",
  "profile",
  "resumed_from_run_id",
  "status",
  "summary",
  "usage",
];

describe("agent_swarm: execution and ordering", () => {
  it("runs a template swarm as ordinary child runs and returns rows in input order whatever the finishing order", async () => {
    const h = await harness(t.db, who);
    // The 0 ms item leads every other by at least 250 ms, so a loaded machine cannot reorder it.
    const sleeps = [600, 250, 450, 0, 350];
    const result = await runSwarm(h.ctx, {
      profile: "general",
      prompt_template: "Describe {{item}} briefly.",
      items: sleeps.map((ms, i) => `topic ${i + 1} [[sleep:${ms}]]`),
      concurrency: 5,
    });

    expect(result.aggregate.status).toBe("completed");
    expect(result.aggregate.counts).toMatchObject({ total: 5, completed: 5, failed: 0, cancelled: 0 });
    expect(result.items.map((r) => r.item_id)).toEqual(["item-1", "item-2", "item-3", "item-4", "item-5"]);
    for (const row of result.items) {
      expect(Object.keys(row).sort()).toEqual(ROW_KEYS);
      expect(row).toMatchObject({ status: "completed", profile: "general", attempts: 1, failure_class: null, error: null });
      expect(row.summary?.length).toBeGreaterThan(0);
    }

    // Children are ordinary runs: kind swarm_child, parent = the lead, one per item.
    const runs = await childRuns(t.db, h.ctx.leadRunId);
    expect(runs).toHaveLength(5);
    const byId = new Map(runs.map((r) => [r.id, r]));
    result.items.forEach((row, i) => {
      const run = byId.get(row.child_run_id!);
      expect(run).toMatchObject({
        kind: "swarm_child",
        status: "completed",
        definition: "general",
        model: "simulator",
        depth: 1,
        rootRunId: h.ctx.leadRunId,
        toolCallId: h.ctx.toolCallId,
        userId: who.userId,
        threadId: who.threadId,
      });
      expect(run?.prompt).toBe(`Describe topic ${i + 1} [[sleep:${sleeps[i]}]] briefly.`);
      expect(row.summary).toBe(run?.result);
    });
    // They really finished out of order.
    const finishOrder = [...runs].sort((a, b) => a.finishedAt!.getTime() - b.finishedAt!.getTime());
    const finishIndex = finishOrder.map((r) => result.items.findIndex((row) => row.child_run_id === r.id));
    expect(finishIndex).not.toEqual([0, 1, 2, 3, 4]);
    expect(finishIndex[0]).toBe(3); // the 0 ms item

    // Usage is the children's sum.
    const sum = runs.reduce((n, r) => n + r.inputTokens, 0);
    expect(result.aggregate.usage.input_tokens).toBe(sum);
  });

  it("never copies prompts or tool arguments into the result", async () => {
    const h = await harness(t.db, who);
    const result = await runSwarm(h.ctx, {
      items: [{ item_id: "secret", profile: "general", task: "SECRET-PROMPT-MARKER [[chars:40]]" }],
    });
    expect(result.items[0].status).toBe("completed");
    expect(JSON.stringify(result)).not.toContain("SECRET-PROMPT-MARKER");
    expect(result.items[0].summary).toHaveLength(40);
  });

  it("bounds each summary and keeps the whole answer in the child run", async () => {
    const h = await harness(t.db, who);
    const result = await runSwarm(h.ctx, {
      items: [{ item_id: "long", profile: "general", task: "write a lot [[chars:5000]]" }],
    });
    const [run] = await childRuns(t.db, h.ctx.leadRunId);
    expect(run.result).toHaveLength(5000);
    expect(result.items[0].summary!.length).toBe(2000);
    expect(result.items[0].summary!.endsWith("…")).toBe(true);
  });

  it("a failed child never erases its siblings", async () => {
    const h = await harness(t.db, who);
    const result = await runSwarm(h.ctx, {
      items: [
        { item_id: "a", profile: "general", task: "first [[sleep:100]]" },
        { item_id: "b", profile: "researcher", task: "second [[fail]]" },
        { item_id: "c", profile: "summarizer", task: "third" },
      ],
    });
    expect(result.aggregate.status).toBe("partial");
    expect(result.items.map((r) => `${r.item_id}:${r.status}:${r.failure_class}`)).toEqual([
      "a:completed:null",
      "b:failed:provider",
      "c:completed:null",
    ]);
    expect(result.items[1].error).toContain("Simulated model failure");
    expect(result.items[1].profile).toBe("researcher");
    const text = swarmModelText(result);
    expect(text).toContain("agent_swarm partial: 3 items, 2 completed, 1 failed, 0 cancelled");
    expect(text.indexOf("[1] a")).toBeLessThan(text.indexOf("[2] b"));
    expect(text.indexOf("[2] b")).toBeLessThan(text.indexOf("[3] c"));
  });

  it("records the boundaries as run events on the lead run and streams live data-swarm parts", async () => {
    const config = swarmConfig({ subagent_runtime: { max_running: 1 } });
    const h = await harness(t.db, who, { config, runtime: createSubagentRuntime(config) });
    const result = await runSwarm(h.ctx, { prompt_template: "note {{item}} [[sleep:60]]", items: ["x", "y", "z"] });
    expect(result.aggregate.status).toBe("completed");

    // The process allows one child at a time: they never overlapped.
    const runs = (await childRuns(t.db, h.ctx.leadRunId)).sort((a, b) => a.startedAt!.getTime() - b.startedAt!.getTime());
    for (let i = 1; i < runs.length; i++) expect(runs[i].startedAt!.getTime()).toBeGreaterThanOrEqual(runs[i - 1].finishedAt!.getTime());

    const events = await eventsOf(t.db, h.ctx.leadRunId);
    const types = events.map((e) => e.type);
    expect(types.filter((x) => x === "swarm.item_queued")).toHaveLength(3);
    expect(types.filter((x) => x === "swarm.item_started")).toHaveLength(3);
    expect(types.filter((x) => x === "swarm.child_started")).toHaveLength(3);
    expect(types.filter((x) => x === "swarm.child_completed")).toHaveLength(3);
    expect(types.filter((x) => x === "swarm.shared_capacity_waiting").length).toBeGreaterThanOrEqual(2);
    expect(types.at(-1)).toBe("swarm.swarm_completed");
    const waiting = events.find((e) => e.type === "swarm.shared_capacity_waiting")!;
    expect(waiting.data).toMatchObject({ boundary: "shared_child_run_permit", stage: "waiting", tool_call_id: h.ctx.toolCallId });
    const started = events.find((e) => e.type === "swarm.item_started")!;
    expect(started.data).toMatchObject({ boundary: "local_swarm_concurrency", swarm_stage: "item_started", attempt: 1 });
    const child = events.find((e) => e.type === "swarm.child_completed")!;
    expect(child.data).toMatchObject({ boundary: "child_run_execution", stage: "completed", status: "completed" });
    expect(events.at(-1)!.data).toMatchObject({ swarm_stage: "batch_completed", aggregate: { status: "completed" } });
    // No prompt text in any event.
    expect(JSON.stringify(events.map((e) => e.data))).not.toContain("note x");

    // Live parts: all with the tool call id, first ones running, the last one final.
    expect(h.parts.length).toBeGreaterThan(2);
    expect(h.parts.every((p) => p.id === h.ctx.toolCallId)).toBe(true);
    expect(h.parts.some((p) => p.data.aggregate.status === "running" && p.data.aggregate.counts.running > 0)).toBe(true);
    const last = h.parts.at(-1)!.data;
    expect(last.aggregate.status).toBe("completed");
    expect(last.items.map((r) => r.status)).toEqual(["completed", "completed", "completed"]);
    expect(last.trace.map((e) => e.type)).toContain("shared_capacity_waiting");
  });

  it("is registered for the lead and refuses a second swarm in the same response while one runs", async () => {
    const h = await harness(t.db, who);
    const tool = createSwarmTool({
      db: t.db,
      config: h.ctx.config,
      userId: who.userId,
      threadId: who.threadId,
      runId: h.ctx.leadRunId,
      model: h.ctx.model,
      abortSignal: h.controller.signal,
      runtime: h.ctx.runtime,
    });
    const call = (id: string, input: unknown) =>
      tool.execute!(input as never, { toolCallId: id, messages: [] }) as Promise<import("@/lib/api/swarm").SwarmResult>;
    const first = call("call_1", { prompt_template: "slow {{item}} [[sleep:300]]", items: ["a"] });
    const second = await call("call_2", { prompt_template: "other {{item}}", items: ["b"] });
    expect(second.aggregate.status).toBe("rejected");
    expect(second.rejection?.message).toContain("another agent_swarm call of this response is still running");
    expect((await first).aggregate.status).toBe("completed");
    expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(1);
    // Afterwards a new call is admitted again.
    expect((await call("call_3", { prompt_template: "again {{item}}", items: ["c"] })).aggregate.status).toBe("completed");
  });
});

describe("agent_swarm: validation starts nothing", () => {
  const bad: Array<[string, unknown, string]> = [
    ["too many items", { prompt_template: "{{item}}", items: Array.from({ length: 33 }, (_, i) => `i${i}`) }, "exceed the limit of 32"],
    ["duplicate expansion", { prompt_template: "Check {{item}}", items: ["a", "b", "a"] }, "expands to the same task as items[0]"],
    ["unknown profile", { items: [{ item_id: "a", profile: "general", task: "ok" }, { item_id: "b", profile: "ghost", task: "x" }] }, "unknown sub-agent profile"],
    ["mixed forms", { prompt_template: "{{item}}", items: ["a", { item_id: "b", profile: "general", task: "x" }] }, "must be plain strings"],
    ["bad resume alongside good items", { prompt_template: "{{item}}", items: ["a"], resume_run_ids: { "00000000-0000-4000-8000-000000000000": "go" } }, "is not a child run of this thread"],
    ["wrong type", { items: "a,b" }, "items"],
  ];
  for (const [name, input, message] of bad)
    it(`rejects ${name} before any child starts`, async () => {
      const h = await harness(t.db, who);
      const result = await runSwarm(h.ctx, input);
      expect(result.aggregate.status).toBe("rejected");
      expect(result.items).toEqual([]);
      expect(result.rejection?.message).toContain(message);
      expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(0);
      const events = await eventsOf(t.db, h.ctx.leadRunId);
      expect(events.map((e) => e.type)).toEqual(["swarm.tool_admission_rejected"]);
      expect(events[0].data).toMatchObject({ boundary: "subagent_tool_admission" });
      expect(swarmModelText(result)).toContain("rejected and nothing ran");
    });

  it("refuses when sub-agents are disabled", async () => {
    const config = swarmConfig({ subagents: { enabled: false } });
    const h = await harness(t.db, who, { config });
    const result = await runSwarm(h.ctx, { prompt_template: "{{item}}", items: ["a"] });
    expect(result.rejection?.message).toContain("subagents.enabled = false");
    expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(0);
  });
});

describe("agent_swarm: cancellation", () => {
  it("signals running children, never starts queued ones, waits for the active ones and returns cancelled rows", async () => {
    const h = await harness(t.db, who);
    const pending = runSwarm(h.ctx, {
      prompt_template: "long job {{item}} [[sleep:20000]]",
      items: ["1", "2", "3", "4", "5"],
      concurrency: 2,
    });
    // Wait until both admitted children are really running.
    for (let i = 0; i < 200; i++) {
      const runs = await childRuns(t.db, h.ctx.leadRunId);
      if (runs.filter((r) => r.status === "running").length === 2) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const abortedAt = Date.now();
    h.controller.abort();
    const result = await pending;
    expect(Date.now() - abortedAt).toBeLessThan(5_000);

    expect(result.aggregate.status).toBe("cancelled");
    expect(result.aggregate.counts).toMatchObject({ total: 5, cancelled: 5, completed: 0 });
    expect(result.aggregate.started).toBe(2);
    expect(result.items.map((r) => `${r.item_id}:${r.status}:${r.attempts}:${r.child_run_id ? "run" : "none"}`)).toEqual([
      "item-1:cancelled:1:run",
      "item-2:cancelled:1:run",
      "item-3:cancelled:0:none",
      "item-4:cancelled:0:none",
      "item-5:cancelled:0:none",
    ]);
    expect(result.items[2].error).toBe("cancelled before it started");
    expect(result.items[0].error).toBe("cancelled while running");
    // The started children are final (joined, not abandoned); the others never got a row.
    const runs = await childRuns(t.db, h.ctx.leadRunId);
    expect(runs.map((r) => r.status)).toEqual(["cancelled", "cancelled"]);
    expect(runs.every((r) => r.finishedAt !== null)).toBe(true);
  });

  it("an already-stopped lead starts nothing", async () => {
    const h = await harness(t.db, who);
    h.controller.abort();
    const result = await runSwarm(h.ctx, { prompt_template: "x {{item}}", items: ["1", "2"] });
    expect(result.items.map((r) => r.status)).toEqual(["cancelled", "cancelled"]);
    expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(0);
  });
});

describe("agent_swarm: provider rate limits end to end (simulator [[429]])", () => {
  it("retries a rate-limited item as a fresh child run linked to the one it retries, then fails it when it is alone", async () => {
    const h = await harness(t.db, who, { timings: { retryBaseDelayMs: 100 } });
    const result = await runSwarm(h.ctx, {
      items: [
        { item_id: "limited", profile: "general", task: "always limited [[429]]" },
        { item_id: "steady", profile: "general", task: "steady work [[sleep:3000]]" },
      ],
    });
    const [limited, steady] = result.items;
    expect(steady).toMatchObject({ status: "completed", attempts: 1 });
    expect(limited).toMatchObject({ status: "failed", failure_class: "rate_limit" });
    expect(limited.attempts).toBeGreaterThanOrEqual(2);
    expect(limited.error).toContain("no other item was left to wait for");

    const runs = (await childRuns(t.db, h.ctx.leadRunId)).filter((r) => r.prompt?.includes("always limited"));
    expect(runs).toHaveLength(limited.attempts);
    expect(runs[0].retryOfRunId).toBeNull();
    for (let i = 1; i < runs.length; i++) {
      expect(runs[i].retryOfRunId).toBe(runs[i - 1].id);
      expect(runs[i].prompt).toBe(runs[0].prompt);
    }
    expect(runs.every((r) => r.status === "failed")).toBe(true);
    expect(limited.child_run_id).toBe(runs.at(-1)!.id);

    const events = await eventsOf(t.db, h.ctx.leadRunId);
    const suspended = events.filter((e) => e.type === "swarm.item_suspended");
    expect(suspended.length).toBe(limited.attempts - 1);
    expect(suspended[0].data).toMatchObject({ item_id: "limited", attempt: 1, delay_ms: 100, failure_class: "rate_limit" });
    const changed = events.filter((e) => e.type === "swarm.capacity_changed");
    expect(changed[0].data).toMatchObject({ direction: "down", effective_capacity: 2, previous_capacity: 3 });
  });

  it("fails a lone rate-limited item at once", async () => {
    const h = await harness(t.db, who);
    const result = await runSwarm(h.ctx, { items: [{ item_id: "solo", profile: "general", task: "solo [[429]]" }] });
    expect(result.items[0]).toMatchObject({ status: "failed", failure_class: "rate_limit", attempts: 1 });
    expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(1);
    expect(result.aggregate.status).toBe("failed");
  });
});

describe("agent_swarm: no nesting", () => {
  it("children do not get agent_swarm (or task), so a swarm line in a child's prompt stays text", async () => {
    const h = await harness(t.db, who);
    const result = await runSwarm(h.ctx, {
      items: [
        {
          item_id: "nested",
          profile: "general",
          task: 'swarm: inner {{item}} | p; q\n[[call:agent_swarm {"prompt_template":"x {{item}}","items":["1"]}]]\ntask: inner task',
        },
      ],
    });
    expect(result.items[0].status).toBe("completed");
    const [child] = await childRuns(t.db, h.ctx.leadRunId);
    const grandchildren = await t.db.select().from(agentRuns).where(eq(agentRuns.parentRunId, child.id));
    expect(grandchildren).toHaveLength(0);
    const parts = (child.transcript as Array<{ content: unknown }>).flatMap((m) => (Array.isArray(m.content) ? m.content : []));
    expect(parts.some((p) => (p as { type?: string }).type === "tool-call")).toBe(false);
  });
});
