import { generateText, stepCountIs, type ToolSet } from "ai";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import type { FlotillaConfig } from "@/lib/config";
import { createBatchTools } from "@/server/agent/tools/batch";
import { buildLeadTools, type LeadToolContext } from "@/server/agent/tools/index";
import { listBatches } from "@/server/batches/repository";
import { resolveModel } from "@/server/models/index";
import { markStopped, writeHeartbeat } from "@/server/runtime/heartbeat";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeOwner, testConfig } from "./support";

let t: TestDatabase;
const WORKER = "tools-suite-worker";

beforeAll(async () => {
  t = await createTestDatabase();
});

async function context(config: FlotillaConfig = testConfig({ simulator: { latency_ms: 1 } })): Promise<LeadToolContext> {
  const owner = await makeOwner(t.db);
  const [run] = await t.db.execute<{ id: string }>(
    sql`insert into agent_runs (user_id, thread_id, kind, definition, model, status) values (${owner.userId}, ${owner.threadId}, 'lead', 'lead', 'simulator', 'running') returning id`,
  );
  return { db: t.db, config, ...owner, runId: run!.id, model: resolveModel(config, {}), abortSignal: new AbortController().signal };
}

// biome-ignore lint/suspicious/noExplicitAny: tool execute signatures are generic over their schemas
async function exec(tools: ToolSet, name: string, input: unknown, toolCallId = "call-1"): Promise<any> {
  const t = tools[name]!;
  return t.execute!(input as never, { toolCallId, messages: [], abortSignal: new AbortController().signal });
}

describe("batch_task and batch_status", () => {
  it("are offered only while a worker is alive (batch_status also for threads with batches), never when disabled", async () => {
    await markStopped(t.db, WORKER);
    const ctx = await context();
    expect(Object.keys(await createBatchTools(ctx))).toEqual([]);
    await writeHeartbeat(t.db, { id: WORKER, capacity: 3, running: 0 });
    expect(Object.keys(await createBatchTools(ctx)).sort()).toEqual(["batch_status", "batch_task"]);
    expect(Object.keys(await buildLeadTools(ctx))).toEqual(expect.arrayContaining(["batch_task", "batch_status"]));
    const disabled = await context(testConfig({ subagent_batches: { enabled: false } }));
    expect(Object.keys(await createBatchTools(disabled))).toEqual([]);

    // History without a worker: the read-only tools (status, results, comparisons), no submissions.
    const tools = await createBatchTools(ctx);
    await exec(tools, "batch_task", { items: ["a"] });
    await markStopped(t.db, WORKER);
    expect(Object.keys(await createBatchTools(ctx))).toEqual(["batch_status", "batch_results", "compare_batches"]);
  });

  it("batch_task returns a receipt at once, keyed by run and tool call, and tells the model not to re-submit", async () => {
    await writeHeartbeat(t.db, { id: WORKER, capacity: 3, running: 0 });
    const ctx = await context();
    const tools = await createBatchTools(ctx);
    const receipt = await exec(tools, "batch_task", { prompt_template: "Rate {{item}}", items: ["x", "y", "z"], max_running_items: 2 }, "call-a");
    expect(receipt).toMatchObject({ status: "queued", total: 3, created: true, subagent: "general", max_running_items: 2, waiting: 3 });
    expect(receipt.batch_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(receipt.message).toMatch(/Do NOT submit these items again as task or agent_swarm/);
    const [row] = await t.db.execute<{ submission_key: string; execution_spec: { caller: { origin: string; run_id: string; tool_call_id: string } } }>(
      sql`select submission_key, execution_spec from subagent_batches where id = ${receipt.batch_id}`,
    );
    expect(row!.submission_key).toBe(`${ctx.runId}:call-a`);
    expect(row!.execution_spec.caller).toMatchObject({ origin: "tool", run_id: ctx.runId, tool_call_id: "call-a" });
    // A replayed tool call (same run, same call id) is the same batch.
    const replay = await exec(tools, "batch_task", { prompt_template: "Rate {{item}}", items: ["x", "y", "z"] }, "call-a");
    expect(replay).toMatchObject({ batch_id: receipt.batch_id, created: false });
    expect(await listBatches(t.db, ctx)).toHaveLength(1);

    const status = await exec(tools, "batch_status", {});
    expect(status.batches).toEqual([expect.objectContaining({ batch_id: receipt.batch_id, total: 3, succeeded: 0, waiting: 3 })]);
    expect(await exec(tools, "batch_status", { batch_id: receipt.batch_id })).toMatchObject({ batches: [{ batch_id: receipt.batch_id }] });
    expect(await exec(tools, "batch_status", { batch_id: "nope" })).toEqual({ error: "batch not found" });
  });

  it("batch_status reports verdict counts for a batch with checks (and none for one without)", async () => {
    await writeHeartbeat(t.db, { id: WORKER, capacity: 3, running: 0 });
    const ctx = await context();
    const tools = await createBatchTools(ctx);
    const checked = await exec(
      tools,
      "batch_task",
      { items: ["a", "b", "c"], checks: [{ name: "says_a", type: "regex", pattern: "a" }] },
      "call-checked",
    );
    const plain = await exec(tools, "batch_task", { items: ["d"] }, "call-plain");
    // Two items finish with verdicts (the counters trigger moves the batch's verdict counts).
    await t.db.execute(sql`
      update subagent_batch_items set status = 'succeeded', finished_at = now(),
             verdict = case when position = 1 then 'passed' else 'failed' end
       where batch_id = ${checked.batch_id} and position <= 2`);
    const status = await exec(tools, "batch_status", {});
    const byId = new Map(status.batches.map((b: { batch_id: string }) => [b.batch_id, b]));
    expect(byId.get(checked.batch_id)).toMatchObject({ succeeded: 2, verdicts: { passed: 1, failed: 1 } });
    expect(byId.get(plain.batch_id)).not.toHaveProperty("verdicts");
  });

  it("reports bad input and a vanished worker as errors with nothing written", async () => {
    await writeHeartbeat(t.db, { id: WORKER, capacity: 3, running: 0 });
    const ctx = await context();
    const tools = await createBatchTools(ctx);
    const dup = await exec(tools, "batch_task", { items: [{ item_key: "k", prompt: "a" }, { item_key: "k", prompt: "b" }] });
    expect(dup.error).toMatch(/duplicate item_key "k"/);
    const sub = await exec(tools, "batch_task", { items: ["a"], subagent: "ghost" });
    expect(sub.error).toMatch(/unknown sub-agent "ghost"/);
    await markStopped(t.db, WORKER);
    const gone = await exec(tools, "batch_task", { items: ["a"] }, "call-late");
    expect(gone.error).toMatch(/No batch worker is running/);
    expect(await listBatches(t.db, ctx)).toEqual([]);
  });

  it("the simulator's `batch:` phrasing in a chat message creates a batch through the tool", async () => {
    await writeHeartbeat(t.db, { id: WORKER, capacity: 3, running: 0 });
    const ctx = await context();
    const tools = await buildLeadTools(ctx);
    const result = await generateText({
      model: ctx.model.model,
      tools,
      stopWhen: stepCountIs(2),
      messages: [{ role: "user", content: "batch: Write a haiku about {{item}} | rivers; mountains; cities" }],
    });
    const call = result.steps[0]!.toolCalls[0]!;
    expect(call.toolName).toBe("batch_task");
    const batches = await listBatches(t.db, ctx);
    expect(batches).toHaveLength(1);
    expect(batches[0]!.total).toBe(3);
    const [item] = await t.db.execute<{ prompt: string }>(sql`select prompt from subagent_batch_items where batch_id = ${batches[0]!.id} and position = 2`);
    expect(item!.prompt).toBe("Write a haiku about mountains");
    const xn = await generateText({ model: ctx.model.model, tools, stopWhen: stepCountIs(2), messages: [{ role: "user", content: "batch x25: Check record {{item}}" }] });
    expect(xn.steps[0]!.toolCalls[0]!.toolName).toBe("batch_task");
    expect((await listBatches(t.db, ctx)).map((b) => b.total).sort()).toEqual([25, 3]);
    await markStopped(t.db, WORKER);
  });
});
