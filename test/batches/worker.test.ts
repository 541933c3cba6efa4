import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import type { SubmitBatchInput } from "@/lib/api/batches";
import type { FlotillaConfig } from "@/lib/config";
import { cancelBatch, getBatch, pauseBatch, resumeBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { CapacityController, type Release } from "@/server/runtime/capacity";
import { type ItemExecutor, subagentItemExecutor } from "@/server/worker/execute";
import { countLiveWorkers } from "@/server/runtime/heartbeat";
import { BatchWorker } from "@/server/worker/loop";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { counterDrift, itemsOf, makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

let t: TestDatabase;
const workers: BatchWorker[] = [];

beforeAll(async () => {
  t = await createTestDatabase({ max: 20 });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop({ waitMs: 2_000 })));
  // Each test owns the queue: park whatever an earlier test left active.
  await t.db.execute(sql`update subagent_batches set status = 'cancelled' where status in ('queued', 'running', 'paused')`);
});

function baseConfig(extra: { batches?: Record<string, unknown>; runtime?: Record<string, unknown>; rate?: Record<string, unknown> } = {}): FlotillaConfig {
  return testConfig({
    subagent_runtime: { max_running: 4, ...extra.runtime },
    subagent_batches: { poll_interval_seconds: 0.1, lease_seconds: 5, max_attempts: 3, ...extra.batches },
    simulator: { latency_ms: 10 },
    rate_limits: { ...extra.rate },
  });
}

function startWorker(config: FlotillaConfig, options: { executor?: ItemExecutor; capacity?: CapacityController; listen?: boolean; id?: string } = {}) {
  const runtime = createSubagentRuntime(config, options.capacity);
  const worker = new BatchWorker({
    database: t,
    config,
    instanceId: options.id ?? `test-worker-${workers.length}-${Math.random().toString(36).slice(2, 8)}`,
    runtime,
    model: resolveModel(config, {}),
    executor: options.executor,
    listen: options.listen,
  });
  workers.push(worker);
  return { worker, runtime, started: worker.start() };
}

let n = 0;
async function submit(owner: { userId: string; threadId: string }, items: SubmitBatchInput["items"], config: FlotillaConfig, extra: Partial<SubmitBatchInput> = {}) {
  n += 1;
  const { batch } = await submitBatch(t.db, { ...batchSubagent(config, extra.subagent), ...owner, input: { submission_key: `w-${n}`, items, ...extra }, config, model: SIM_MODEL });
  return batch;
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

const finished = (owner: { userId: string; threadId: string }, batchId: string) =>
  waitFor("the batch to finish", async () => {
    const b = await getBatch(t.db, { ...owner, batchId });
    return ["completed", "failed", "cancelled"].includes(b.status) ? b : undefined;
  });

describe("batch worker (in process, real executor and simulator)", () => {
  it("runs every item through the sub-agent executor and stores results, previews, model, usage", async () => {
    const config = baseConfig({ batches: { max_result_chars: 100, result_preview_max_chars: 20 } });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, ["alpha [[sleep:30]]", "beta [[chars:500]]", "gamma", "delta", "epsilon"], config, { max_running_items: 3 });
    const { worker } = startWorker(config);
    const done = await finished(owner, batch.id);
    expect(done).toMatchObject({ status: "completed", succeededCount: 5, failedCount: 0 });
    expect(done.inputTokens).toBeGreaterThan(0);
    expect(done.outputTokens).toBeGreaterThan(0);
    const rows = await t.db.execute<{ item_key: string; result: string; preview: string; model: string; stop_reason: string; run_id: string; input_tokens: string }>(
      sql`select item_key, result, preview, model, stop_reason, run_id, input_tokens from subagent_batch_items where batch_id = ${batch.id} order by position`,
    );
    for (const r of rows) {
      expect(r.result.length).toBeGreaterThan(0);
      expect(r.result.length).toBeLessThanOrEqual(100);
      expect(r.preview).toBe(r.result.slice(0, 20));
      expect(r.model).toBe("simulator");
      expect(r.stop_reason).toBe("stop");
      expect(Number(r.input_tokens)).toBeGreaterThan(0);
    }
    expect(rows[1]!.result).toHaveLength(100);
    const runs = await t.db.execute<{ kind: string; status: string; definition: string; user_id: string }>(
      sql`select kind, status, definition, user_id from agent_runs where id in (select run_id from subagent_batch_items where batch_id = ${batch.id})`,
    );
    expect(runs).toHaveLength(5);
    expect(runs.every((r) => r.kind === "batch_item" && r.status === "completed" && r.definition === "general" && r.user_id === owner.userId)).toBe(true);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
    expect(worker.counters.claimed).toBe(5);
    expect(await countLiveWorkers(t.db, 30)).toBeGreaterThan(0);
  });

  it("retries failing items up to max_attempts and recovers from a one-off failure", async () => {
    const config = baseConfig();
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, [`always broken ${Date.now()} [[fail]]`, `flaky once ${Date.now()} [[fail-once]]`, "fine"], config, { max_running_items: 3 });
    startWorker(config);
    const done = await finished(owner, batch.id);
    expect(done).toMatchObject({ status: "completed", succeededCount: 2, failedCount: 1 });
    const items = await itemsOf(t.db, batch.id);
    expect(items.map((i) => [i.status, i.attempts])).toEqual([
      ["failed", 3],
      ["succeeded", 2],
      ["succeeded", 1],
    ]);
    expect({ error: items[0]!.error }).toEqual({ error: expect.stringMatching(/Simulated model failure/) });
  });

  it("rebuilds the snapshot boundary: a definition removed from the worker's configuration still runs as submitted", async () => {
    const submitConfig = testConfig({
      subagents: { definitions: [{ name: "checker", description: "checks things", system_prompt: "You check.", tool_groups: ["text"] }] },
      simulator: { latency_ms: 5 },
    });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, ["check this"], submitConfig, { subagent: "checker" });
    startWorker(baseConfig());
    const done = await finished(owner, batch.id);
    expect(done.status).toBe("completed");
    const [run] = await t.db.execute<{ definition: string }>(
      sql`select definition from agent_runs where id = (select run_id from subagent_batch_items where batch_id = ${batch.id})`,
    );
    expect(run!.definition).toBe("checker");
  });

  it("cancel aborts in-flight model calls within one poll interval (polling alone, no LISTEN)", async () => {
    const config = baseConfig({ batches: { poll_interval_seconds: 0.25 } });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, Array.from({ length: 6 }, (_, i) => `slow ${i} [[sleep:20000]]`), config, { max_running_items: 3 });
    const { worker } = startWorker(config, { listen: false });
    await waitFor("three running items", async () => (await getBatch(t.db, { ...owner, batchId: batch.id })).runningCount === 3);
    const cancelledAt = Date.now();
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
    await waitFor("local runs to abort", async () => worker.localCount === 0, 5_000);
    expect(Date.now() - cancelledAt).toBeLessThan(250 + 500);
    const runs = await waitFor("run rows to be final", async () => {
      const rows = await t.db.execute<{ status: string }>(
        sql`select status from agent_runs where kind = 'batch_item' and id in (select run_id from subagent_batch_item_attempts where batch_id = ${batch.id})
            union all select status from agent_runs where kind = 'batch_item' and status in ('pending', 'running')`,
      );
      return rows.every((r) => r.status !== "running" && r.status !== "pending") ? rows : undefined;
    });
    expect(runs.every((r) => r.status !== "running")).toBe(true);
    const items = await itemsOf(t.db, batch.id);
    expect(items.every((i) => i.status === "cancelled" && i.result === null)).toBe(true);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });

  it("cancel reaches the worker at once through LISTEN/NOTIFY", async () => {
    const config = baseConfig({ batches: { poll_interval_seconds: 30 } });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, Array.from({ length: 2 }, (_, i) => `slow ${i} [[sleep:20000]]`), config, { max_running_items: 2 });
    const { worker, started } = startWorker(config, { listen: true });
    await started;
    await waitFor("two running items", async () => (await getBatch(t.db, { ...owner, batchId: batch.id })).runningCount === 2);
    const cancelledAt = Date.now();
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
    await waitFor("local runs to abort", async () => worker.localCount === 0, 5_000);
    expect(Date.now() - cancelledAt).toBeLessThan(1_000);
  });

  it("a capacity refusal returns the item to queued without consuming an attempt", async () => {
    const config = baseConfig({ runtime: { max_running: 1, admission_policy: "reject" } });
    const capacity = new CapacityController({ maxRunning: 1, maxQueued: 0, policy: "reject", queueTimeoutMs: 1_000 });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, ["needs a slot"], config);
    let thief: Release | undefined;
    const runtime = createSubagentRuntime(config, capacity);
    const real = subagentItemExecutor({ db: t.db, model: resolveModel(config, {}), runtime });
    let calls = 0;
    const executor: ItemExecutor = async (ctx) => {
      calls++;
      // Something else in the process takes the only slot between the claim and the acquire.
      if (calls === 1) thief = await capacity.acquire();
      return real(ctx);
    };
    const { worker } = startWorker(config, { executor, capacity });
    await waitFor("the release", async () => worker.counters.released === 1);
    const [row] = await itemsOf(t.db, batch.id);
    expect(["queued", "leased"]).toContain(row!.status);
    const history = await t.db.execute<{ outcome: string; attempt: number }>(sql`select outcome, attempt from subagent_batch_item_attempts where batch_id = ${batch.id}`);
    expect(history.map((h) => [h.outcome, h.attempt])).toEqual([["released", 1]]);
    thief!();
    const done = await finished(owner, batch.id);
    expect(done.status).toBe("completed");
    const [final] = await itemsOf(t.db, batch.id);
    expect(final).toMatchObject({ status: "succeeded", attempts: 1 });
  });

  it("defers rate-limited items without consuming attempts, up to max_deferrals", async () => {
    const config = baseConfig({ rate: { max_deferrals: 2 }, batches: { max_attempts: 1 } });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, ["limited"], config);
    const seen: number[] = [];
    const executor: ItemExecutor = async ({ item, onStarted }) => {
      await onStarted();
      seen.push(item.attempt);
      return { status: "failed", text: "", usage: { inputTokens: 1, outputTokens: 0 }, model: "simulator", stopReason: "error", error: "429 slow down", errorClass: "rate_limit", retryAfterMs: 50 };
    };
    startWorker(config, { executor });
    const done = await finished(owner, batch.id);
    expect(done.status).toBe("failed");
    // Two deferrals refunded their attempt; the third rate limit consumed the only attempt.
    expect(seen).toEqual([1, 1, 1]);
    const [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ status: "failed", attempts: 1 });
    expect(row!.error).toMatch(/max_deferrals/);
    expect(done.inputTokens).toBe(3);
  });

  it("pause stops new claims while running items finish; resume continues", async () => {
    const config = baseConfig();
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, Array.from({ length: 6 }, (_, i) => `p${i} [[sleep:300]]`), config, { max_running_items: 2 });
    startWorker(config);
    await waitFor("two running", async () => (await getBatch(t.db, { ...owner, batchId: batch.id })).runningCount === 2);
    await pauseBatch(t.db, { ...owner, batchId: batch.id });
    await waitFor("in-flight items to finish", async () => {
      const b = await getBatch(t.db, { ...owner, batchId: batch.id });
      return b.runningCount + b.leasedCount === 0 ? b : undefined;
    });
    await sleep(400);
    const paused = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(paused).toMatchObject({ status: "paused", succeededCount: 2, runningCount: 0, leasedCount: 0 });
    await resumeBatch(t.db, { ...owner, batchId: batch.id });
    expect((await finished(owner, batch.id)).succeededCount).toBe(6);
  });

  it("shutdown hands its rows back to queued at once with the attempt restored; another worker finishes them", async () => {
    const config = baseConfig({ batches: { lease_seconds: 60 } });
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, Array.from({ length: 3 }, (_, i) => `s${i} [[sleep:1500]]`), config, { max_running_items: 3 });
    const first = startWorker(config, { id: "first-worker" });
    await waitFor("three running", async () => (await getBatch(t.db, { ...owner, batchId: batch.id })).runningCount === 3);
    await first.worker.stop();
    const handedBack = await itemsOf(t.db, batch.id);
    expect(handedBack.every((i) => i.status === "queued" && i.lease_owner === null && i.attempts === 0)).toBe(true);
    expect(await getBatch(t.db, { ...owner, batchId: batch.id })).toMatchObject({ queuedCount: 3, runningCount: 0, leasedCount: 0 });
    const startedAt = Date.now();
    startWorker(config, { id: "second-worker" });
    const done = await finished(owner, batch.id);
    expect(done).toMatchObject({ status: "completed", succeededCount: 3 });
    // Far below the 60 s lease: nobody waited for it to expire.
    expect(Date.now() - startedAt).toBeLessThan(15_000);
    const items = await itemsOf(t.db, batch.id);
    expect(items.every((i) => i.attempts === 1)).toBe(true);
    const history = await t.db.execute<{ outcome: string; worker_id: string }>(
      sql`select outcome, worker_id from subagent_batch_item_attempts where batch_id = ${batch.id} order by id`,
    );
    expect(history.filter((h) => h.outcome === "released" && h.worker_id === "first-worker")).toHaveLength(3);
    expect(history.filter((h) => h.outcome === "succeeded" && h.worker_id === "second-worker")).toHaveLength(3);
  });
});
