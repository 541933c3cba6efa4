import { eq } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { backgroundJobCount } from "@/server/agent/background";
import { admitSwarm } from "@/server/agent/swarm/admission";
import { systemClock } from "@/server/agent/swarm/clock";
import { attemptThrew, runChildAttempt } from "@/server/agent/swarm/attempt";
import { type SwarmEntries, childRun, swarmEntries } from "@/server/agent/swarm/entries";
import { swarmReceipt } from "@/server/agent/swarm/receipt";
import type { AttemptRequest } from "@/server/agent/swarm/scheduler";
import { projectEvent, scheduleEntries } from "@/server/agent/swarm/scheduling";
import { ERROR_MAX_CHARS, SwarmRows } from "@/server/agent/swarm/settlement";
import { SwarmTrace } from "@/server/agent/swarm/trace";
import type { SwarmContext, SwarmEntry } from "@/server/agent/swarm/types";
import { childWakeups } from "@/server/db/schema";
import { log } from "@/server/log";
import { CapacityRejectedError } from "@/server/runtime/capacity";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { childRuns, eventsOf, harness, seedUserThread } from "./support";

/** The swarm's stages called one by one, as swarmCall composes them (server/agent/swarm/run.ts). */

let t: TestDatabase;
let who: { userId: string; threadId: string };

beforeAll(async () => {
  t = await createTestDatabase();
  who = await seedUserThread(t.db);
});

const clock = systemClock;
const logger = log.child({ test: "swarm-stages" });

function traceOf(ctx: SwarmContext): SwarmTrace {
  return new SwarmTrace({ db: t.db, leadRunId: ctx.leadRunId, toolCallId: ctx.toolCallId, writer: ctx.writer, now: clock.now, startedAt: clock.now(), logger });
}

function stageOf(ctx: SwarmContext, { entries, concurrency }: SwarmEntries) {
  const trace = traceOf(ctx);
  const rows = new SwarmRows(entries, concurrency, clock, clock.now());
  trace.attach(() => rows.snapshot());
  return { ctx, runtime: ctx.runtime!, trace, rows, logger, entries, concurrency };
}

const request = (item: SwarmEntry, signal = new AbortController().signal): AttemptRequest<SwarmEntry> => ({
  index: 0,
  item,
  attempt: 1,
  retryOfRunId: null,
  signal,
});

describe("the admission stage", () => {
  it("holds the lead run's one swarm place until release, and answers a refusal as a traced rejected result", async () => {
    const h = await harness(t.db, who);
    const input = { prompt_template: "check {{item}}", items: ["a", "b"], concurrency: 2 };
    const first = await admitSwarm(h.ctx, input, traceOf(h.ctx), logger);
    expect(first.admitted).toBe(true);
    if (!first.admitted) return;
    expect(first.plan.items.map((i) => i.task)).toEqual(["check a", "check b"]);

    // Same lead run, place still held: refused, traced on the lead run, nothing started.
    const trace = traceOf(h.ctx);
    const second = await admitSwarm(h.ctx, input, trace, logger);
    expect(second).toMatchObject({ admitted: false, result: { aggregate: { status: "rejected" }, items: [] } });
    if (second.admitted) return;
    expect(second.result.rejection).toMatchObject({ code: "conflict" });
    const events = await eventsOf(t.db, h.ctx.leadRunId);
    expect(events.map((e) => e.type)).toEqual(["swarm.tool_admission_rejected"]);
    expect(events[0].data).toMatchObject({ boundary: "subagent_tool_admission", reason: expect.stringContaining("still running") });

    first.release();
    const third = await admitSwarm(h.ctx, input, traceOf(h.ctx), logger);
    expect(third.admitted).toBe(true);
    if (third.admitted) third.release();
    expect(await childRuns(t.db, h.ctx.leadRunId)).toHaveLength(0);
  });

  it("a refused input does not keep the place: the next call of the same response is admitted", async () => {
    const h = await harness(t.db, who);
    const bad = await admitSwarm(h.ctx, { items: [{ item_id: "x", profile: "ghost", task: "t" }] }, traceOf(h.ctx), logger);
    expect(bad).toMatchObject({ admitted: false, result: { rejection: { code: "validation_failed" } } });
    const good = await admitSwarm(h.ctx, { prompt_template: "{{item}}", items: ["a"] }, traceOf(h.ctx), logger);
    expect(good.admitted).toBe(true);
    if (good.admitted) good.release();
  });
});

describe("the entries stage", () => {
  it("puts resumes first, then the items, at the plan's concurrency; each becomes a swarm_child one level down", async () => {
    const h = await harness(t.db, who);
    const plan = {
      form: "template" as const,
      resumes: [],
      items: [{ item_id: "item-1", profile: "general", task: "do 1" }],
      concurrency: 4,
      background: false,
    };
    const resume = { item_id: "resume-1", source_run_id: "00000000-0000-4000-8000-000000000001", prompt: "go on", profile: "researcher", history: [] };
    const { entries, concurrency } = swarmEntries(plan, [resume]);
    expect(concurrency).toBe(4);
    expect(entries.map((e) => [e.item_id, e.profile, e.prompt, e.resumedFrom])).toEqual([
      ["resume-1", "researcher", "go on", resume.source_run_id],
      ["item-1", "general", "do 1", null],
    ]);
    const child = childRun({ ...h.ctx, depth: 1, rootRunId: "root" }, h.ctx.runtime!, entries[1]);
    expect(child).toMatchObject({ kind: "swarm_child", parentRunId: h.ctx.leadRunId, rootRunId: "root", depth: 2, prompt: "do 1" });
    expect(child.definition.name).toBe("general");
    expect(() => childRun(h.ctx, h.ctx.runtime!, { ...entries[1], profile: "ghost" })).toThrow(/ghost/);
  });
});

describe("each child's attempt", () => {
  it("runs one ordinary child run, adds its usage to the call's, and traces its start and end", async () => {
    const h = await harness(t.db, who);
    const entry: SwarmEntry = { item_id: "one", profile: "general", prompt: "hello [[chars:30]]", resumedFrom: null };
    const stage = stageOf(h.ctx, { entries: [entry], concurrency: 1 });
    const outcome = await runChildAttempt(stage, request(entry));
    await stage.trace.flush();

    const [run] = await childRuns(t.db, h.ctx.leadRunId);
    expect(outcome).toMatchObject({ status: "completed", failureClass: null, runId: run.id, error: null });
    expect(outcome.text).toHaveLength(30);
    expect(run).toMatchObject({ status: "completed", kind: "swarm_child", toolCallId: h.ctx.toolCallId, depth: 1 });
    expect(stage.rows.currentRunId[0]).toBe(run.id);
    expect(stage.rows.rows[0].child_run_id).toBe(run.id);
    expect(stage.rows.usage.input_tokens).toBe(run.inputTokens);
    expect(stage.rows.usage.input_tokens).toBeGreaterThan(0);
    // The row carries its own tokens (the card shows them per item).
    expect(stage.rows.rows[0].usage).toEqual({ input_tokens: run.inputTokens, output_tokens: run.outputTokens });
    const types = (await eventsOf(t.db, h.ctx.leadRunId)).map((e) => e.type);
    expect(types).toEqual(["swarm.child_started", "swarm.child_completed"]);
  });

  it("a failed child is a failed outcome with its class; a thrown capacity refusal or abort is classified too", async () => {
    const h = await harness(t.db, who);
    const entry: SwarmEntry = { item_id: "bad", profile: "general", prompt: "x [[fail]]", resumedFrom: null };
    const stage = stageOf(h.ctx, { entries: [entry], concurrency: 1 });
    const failed = await runChildAttempt(stage, request(entry));
    expect(failed).toMatchObject({ status: "failed", failureClass: "provider", error: expect.stringContaining("Simulated model failure") });

    const refused = attemptThrew(stage, new CapacityRejectedError("full ".repeat(200), "queue_full"), request(entry));
    expect(refused).toMatchObject({ status: "failed", failureClass: "capacity_rejected", text: "" });
    expect(refused.error).toHaveLength(ERROR_MAX_CHARS);
    const stopped = new AbortController();
    stopped.abort();
    expect(attemptThrew(stage, new Error("boom"), request(entry, stopped.signal))).toMatchObject({ status: "cancelled", failureClass: null });
  });
});

describe("the scheduler stage", () => {
  it("runs every entry under the concurrency and projects the events onto the rows and the trace", async () => {
    const h = await harness(t.db, who);
    const entries: SwarmEntry[] = ["a", "b", "c"].map((id) => ({ item_id: id, profile: "general", prompt: `say ${id} [[sleep:20]]`, resumedFrom: null }));
    const stage = stageOf(h.ctx, { entries, concurrency: 2 });
    const result = await scheduleEntries({ ...stage, signal: new AbortController().signal, clock });
    await stage.trace.flush();

    expect(result.cancelled).toBe(false);
    const settlements = [...result.settlements].sort((x, y) => x.index - y.index);
    expect(settlements.map((s) => [s.index, s.status, s.attempts])).toEqual([
      [0, "completed", 1],
      [1, "completed", 1],
      [2, "completed", 1],
    ]);
    // Live rows were already settled by the item_settled events, each with its own run.
    expect(stage.rows.rows.map((r) => r.status)).toEqual(["completed", "completed", "completed"]);
    expect(new Set(stage.rows.rows.map((r) => r.child_run_id)).size).toBe(3);
    expect(stage.rows.lastOutcome.every((o) => o?.status === "completed")).toBe(true);
    expect(stage.rows.firstStart.every((s) => s !== null)).toBe(true);
    const types = (await eventsOf(t.db, h.ctx.leadRunId)).map((e) => e.type);
    expect(types.filter((x) => x === "swarm.item_queued")).toHaveLength(3);
    expect(types.filter((x) => x === "swarm.item_started")).toHaveLength(3);
  });

  it("a suspension and a capacity change show in the row and the aggregate", () => {
    const entries: SwarmEntry[] = [{ item_id: "a", profile: "general", prompt: "p", resumedFrom: null }];
    const rows = new SwarmRows(entries, 3, clock, clock.now());
    const recorded: string[] = [];
    const trace = { record: (type: string) => recorded.push(type), publishSoon: () => {} } as unknown as SwarmTrace;
    const stage = { entries, rows, trace, clock };
    projectEvent(stage, { type: "item_started", index: 0, attempt: 1, retryOfRunId: null });
    expect(rows.rows[0]).toMatchObject({ status: "running", attempts: 1 });
    projectEvent(stage, { type: "item_suspended", index: 0, attempt: 1, delayMs: 50, runId: "r1" });
    projectEvent(stage, { type: "capacity_changed", direction: "down", effective: 2, previous: 3 });
    expect(rows.rows[0]).toMatchObject({ status: "suspended", failure_class: "rate_limit" });
    expect(rows.aggregate()).toMatchObject({ concurrency: 3, effective_capacity: 2, counts: { suspended: 1 }, started: 1 });
    expect(recorded).toEqual(["item_started", "item_suspended", "capacity_changed"]);
  });
});

describe("the settlement stage", () => {
  const entries: SwarmEntry[] = ["a", "b", "c"].map((id) => ({ item_id: id, profile: "general", prompt: "p", resumedFrom: null }));
  const settled = (index: number, status: "completed" | "failed" | "cancelled", reason: Parameters<SwarmRows["finishRow"]>[1]["reason"], attempts = 1) => ({
    index,
    status,
    reason,
    attempts,
    outcome: null,
    firstStartedAt: 10,
    settledAt: 35.4,
  });

  it("says why each item ended, bounds answers and errors, and names the call's status", () => {
    const rows = new SwarmRows(entries, 2, clock, clock.now());
    rows.lastOutcome[0] = { status: "completed", runId: "r0", text: "x".repeat(20_000), error: null, failureClass: null };
    rows.lastOutcome[1] = { status: "failed", runId: "r1", text: "", error: "rate limited", failureClass: "rate_limit" };
    const result = rows.settle({
      settlements: [settled(0, "completed", "settled"), settled(1, "failed", "rate_limit_exhausted", 3), settled(2, "cancelled", "cancelled_before_start", 0)],
      cancelled: false,
      effectiveCapacity: 2,
    });
    expect(result.aggregate).toMatchObject({ status: "partial", counts: { total: 3, completed: 1, failed: 1, cancelled: 1 } });
    const [a, b, c] = result.items;
    // 24,000 characters over three rows: 2,000 each at most.
    expect(a).toMatchObject({ status: "completed", child_run_id: "r0", error: null, failure_class: null, duration_ms: 25 });
    expect(a.summary).toHaveLength(2_000);
    expect(b).toMatchObject({ status: "failed", failure_class: "rate_limit", attempts: 3, error: "rate limited by the provider on all 3 attempts" });
    expect(c).toMatchObject({ status: "cancelled", error: "cancelled before it started", child_run_id: null, summary: null });
  });

  it("all failed or cancelled is failed; a cancelled schedule is cancelled; all done is completed", () => {
    const statusOf = (statuses: Array<"completed" | "failed" | "cancelled">, cancelled = false) =>
      new SwarmRows(entries, 1, clock, clock.now()).settle({
        settlements: statuses.map((s, i) => settled(i, s, "settled")),
        cancelled,
        effectiveCapacity: 1,
      }).aggregate.status;
    expect(statusOf(["failed", "cancelled", "failed"])).toBe("failed");
    expect(statusOf(["completed", "completed", "completed"])).toBe("completed");
    expect(statusOf(["completed", "cancelled", "cancelled"], true)).toBe("cancelled");
  });
});

describe("the background receipt", () => {
  it("writes the pending children and the wake-up row, answers at once, runs the entries on those rows, then releases", async () => {
    const h = await harness(t.db, who);
    const { entries } = swarmEntries(
      { form: "template", resumes: [], items: [{ item_id: "item-1", profile: "general", task: "later [[sleep:50]]" }], concurrency: 1, background: true },
      [],
    );
    let released = 0;
    let ranOn: string[] = [];
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    const receipt = await swarmReceipt(h.ctx, h.ctx.runtime!, entries, () => (released += 1), async (signal, runIds) => {
      ranOn = runIds;
      const stage = stageOf(h.ctx, { entries, concurrency: 1 });
      const result = await scheduleEntries({ ...stage, firstRunIds: runIds, signal, clock });
      finish();
      return stage.rows.settle(result);
    });
    expect(receipt).toMatchObject({ background: true, run_ids: [expect.any(String)] });
    const [wakeup] = await t.db.select().from(childWakeups).where(eq(childWakeups.leadRunId, h.ctx.leadRunId));
    expect(wakeup).toMatchObject({ tool: "agent_swarm", runIds: receipt.run_ids, toolCallId: h.ctx.toolCallId });

    await finished;
    for (let i = 0; i < 200 && (released === 0 || backgroundJobCount() > 0); i++) await new Promise((r) => setTimeout(r, 25));
    expect(ranOn).toEqual(receipt.run_ids);
    expect(released).toBe(1);
    // The first attempt ran on the receipt's own row: no other child run.
    const runs = await childRuns(t.db, h.ctx.leadRunId);
    expect(runs.map((r) => [r.id, r.status])).toEqual([[receipt.run_ids[0], "completed"]]);
  });

  it("releases at once and writes nothing when a child cannot be resolved", async () => {
    const h = await harness(t.db, who);
    let released = 0;
    const ghost: SwarmEntry = { item_id: "x", profile: "ghost", prompt: "p", resumedFrom: null };
    await expect(swarmReceipt(h.ctx, h.ctx.runtime!, [ghost], () => (released += 1), async () => {
      throw new Error("must not run");
    })).rejects.toThrow(/ghost/);
    expect(released).toBe(1);
    expect(await t.db.select().from(childWakeups).where(eq(childWakeups.leadRunId, h.ctx.leadRunId))).toHaveLength(0);
  });
});
