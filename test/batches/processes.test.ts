import { batchSubagent } from "@/server/agent/registry";
import { type ChildProcess, spawn } from "node:child_process";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { exportLines } from "../helpers/export";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { counterDrift, makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

/**
 * Concurrency proofs with real worker processes (`server/worker/main.ts`, the `npm run worker`
 * entrypoint) sharing the suite's database: the per-batch running limit under contention, and
 * recovery from SIGKILL at random.
 */

let t: TestDatabase;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
});

function spawnWorker(env: Record<string, string>): ChildProcess {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")),
  );
  // node --import tsx runs the entrypoint in this one process, so SIGKILL kills the worker itself.
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    cwd: process.cwd(),
    env: { ...base, DATABASE_URL: t.url, LOG_LEVEL: "warn", NODE_ENV: "production", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d) => {
    stderr += String(d);
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  child.on("exit", (code, signal) => {
    children.delete(child);
    if (code !== 0 && signal === null) console.error(`worker exited with ${code}: ${stderr}`);
  });
  children.add(child);
  return child;
}

/** SIGTERM every running worker; resolves with their exit codes. */
async function stopAll(): Promise<Array<number | null>> {
  return Promise.all(
    [...children].map(
      (child) =>
        new Promise<number | null>((resolve) => {
          child.once("exit", (code) => resolve(code));
          child.kill("SIGTERM");
        }),
    ),
  );
}

async function waitForLiveWorkers(n: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const [row] = await t.db.execute<{ n: number }>(
      sql`select count(*)::int as n from worker_heartbeats where stopped_at is null and last_heartbeat_at > now() - interval '10 seconds'`,
    );
    if (row!.n >= n) return;
    if (Date.now() > deadline) throw new Error(`only ${row!.n} of ${n} workers came up`);
    await sleep(100);
  }
}

async function waitForTerminal(owner: { userId: string; threadId: string }, batchId: string, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const b = await getBatch(t.db, { ...owner, batchId });
    if (["completed", "failed", "cancelled"].includes(b.status)) return b;
    if (Date.now() > deadline) throw new Error(`batch still ${b.status}: ${JSON.stringify({ s: b.succeededCount, f: b.failedCount, r: b.runningCount, l: b.leasedCount, q: b.queuedCount, p: b.pendingCount })}`);
    await sleep(200);
  }
}

describe("real worker processes", () => {
  it("4 workers on one batch never hold more than max_running_items = 5 (audited by a trigger)", async () => {
    await t.db.execute(sql`create table running_audit (batch_id uuid, held int, at timestamptz default clock_timestamp())`);
    await t.db.execute(
      sql.raw(`create function running_audit_fn() returns trigger language plpgsql as $$
        begin
          insert into running_audit (batch_id, held)
          select batch_id, count(*) from subagent_batch_items
           where batch_id in (select distinct batch_id from new_items) and status in ('leased', 'running')
           group by batch_id;
          return null;
        end $$`),
    );
    await t.db.execute(sql`create trigger running_audit_trg after update on subagent_batch_items
      referencing new table as new_items for each statement execute function running_audit_fn()`);

    const owner = await makeOwner(t.db);
    const config = testConfig();
    const items = Array.from({ length: 80 }, (_, i) => `audit ${i} [[sleep:${60 + (i % 5) * 20}]]`);
    // 2 slots each: 8 local slots in all, so filling the batch's 5 takes at least three processes.
    const env = {
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
      FLOTILLA__SIMULATOR__LATENCY_MS: "10",
    };
    for (let i = 0; i < 4; i++) spawnWorker(env);
    await waitForLiveWorkers(4);
    const { batch } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "audit", items, max_running_items: 5, max_live_items: 20 },
      config,
      model: SIM_MODEL,
    });
    // Independent sampling alongside the trigger.
    let sampledMax = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const [row] = await t.db.execute<{ n: number }>(
          sql`select count(*)::int as n from subagent_batch_items where batch_id = ${batch.id} and status in ('leased', 'running')`,
        );
        sampledMax = Math.max(sampledMax, row!.n);
        await sleep(5);
      }
    })();
    const done = await waitForTerminal(owner, batch.id, 60_000);
    sampling = false;
    await sampler;
    // SIGTERM: each worker stops claiming, says it stopped, and exits cleanly.
    expect(await stopAll()).toEqual([0, 0, 0, 0]);
    const [beats] = await t.db.execute<{ n: number; stopped: number }>(
      sql`select count(*)::int as n, count(stopped_at)::int as stopped from worker_heartbeats`,
    );
    expect(beats).toEqual({ n: 4, stopped: 4 });

    expect(done).toMatchObject({ status: "completed", succeededCount: 80 });
    const [audit] = await t.db.execute<{ max: number; n: number }>(
      sql`select max(held)::int as max, count(*)::int as n from running_audit where batch_id = ${batch.id}`,
    );
    expect(audit!.n).toBeGreaterThan(100);
    expect(audit!.max).toBe(5);
    expect(sampledMax).toBeLessThanOrEqual(5);
    // Several processes really competed for the same batch.
    const [owners] = await t.db.execute<{ n: number }>(
      sql`select count(distinct worker_id)::int as n from subagent_batch_item_attempts where batch_id = ${batch.id}`,
    );
    expect(owners!.n).toBeGreaterThanOrEqual(3);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
    await t.db.execute(sql`drop trigger running_audit_trg on subagent_batch_items`);
  }, 90_000);

  it("chaos: 3 workers killed with SIGKILL at random and restarted; every item ends terminal exactly once", async () => {
    const owner = await makeOwner(t.db);
    const config = testConfig({ subagent_batches: { max_items_per_batch: 600, lease_seconds: 2 } });
    let seed = 42;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const items = Array.from({ length: 600 }, (_, i) => ({ item_key: `chaos-${i}`, prompt: `item ${i} [[sleep:${20 + Math.floor(random() * 280)}]]` }));
    const env = {
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "16",
      FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "2",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.2",
      FLOTILLA__SIMULATOR__LATENCY_MS: "10",
    };
    const slots: ChildProcess[] = [spawnWorker(env), spawnWorker(env), spawnWorker(env)];
    await waitForLiveWorkers(3);
    const { batch } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "chaos", items, max_running_items: 48, max_live_items: 200 },
      config,
      model: SIM_MODEL,
    });

    let kills = 0;
    const chaosUntil = Date.now() + 12_000;
    while (Date.now() < chaosUntil) {
      await sleep(1_000 + random() * 2_000);
      const victim = Math.floor(random() * slots.length);
      slots[victim]!.kill("SIGKILL");
      kills++;
      slots[victim] = spawnWorker(env);
    }
    const done = await waitForTerminal(owner, batch.id, 90_000);
    await stopAll();

    expect(kills).toBeGreaterThanOrEqual(4);
    expect(["completed", "failed"]).toContain(done.status);
    expect(done.succeededCount + done.failedCount + done.cancelledCount).toBe(600);
    expect(done.pendingCount + done.queuedCount + done.leasedCount + done.runningCount).toBe(0);
    expect(done.succeededCount).toBeGreaterThan(500);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
    const [over] = await t.db.execute<{ n: number; recovered: number }>(sql`
      select count(*) filter (where attempts > max_attempts)::int as n,
             (select count(*)::int from subagent_batch_item_attempts where batch_id = ${batch.id} and outcome = 'lease_expired') as recovered
        from subagent_batch_items i join subagent_batches b on b.id = i.batch_id where b.id = ${batch.id}`);
    expect(over!.n).toBe(0);
    // The kills really cost leases that had to be recovered.
    expect(over!.recovered).toBeGreaterThan(0);
    const keys = new Set<string>();
    let lines = 0;
    for (const line of await exportLines(t.sql, batch.id)) {
      lines++;
      keys.add(line.item_key);
      expect(["succeeded", "failed"]).toContain(line.status);
      if (line.status === "succeeded") expect(line.result).toBeTruthy();
    }
    expect(lines).toBe(600);
    expect(keys.size).toBe(600);
  }, 150_000);
});
