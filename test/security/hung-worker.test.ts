import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchSubagent } from "@/server/agent/registry";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { countLiveWorkers } from "@/server/runtime/heartbeat";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/**
 * A hung worker pass is detected (issue 38), with real worker processes on real PostgreSQL. The
 * test holds a lock every claim needs (an EXCLUSIVE lock on subagent_batches: reads go on, row
 * locks wait), so the worker's pass waits on it as it would behind any stuck transaction.
 * - Under worker_lock_timeout_seconds the pass is abandoned at its bound and the wait logged, no worker
 *   session waits on the lock past it, and once the lock is gone the same process finishes the
 *   batch: the loop went on.
 * - With the bound beyond worker_stall_seconds, the loop makes no progress while the heartbeat
 *   timer still runs; the worker's watchdog ends the process (what `npm start` restarts), and a
 *   new worker finishes both users' batches.
 */

let t: TestDatabase;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await t?.close();
});

function spawnWorker(env: Record<string, string>): { child: ChildProcess; exited: Promise<string>; output: () => string } {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    env: {
      ...base,
      DATABASE_URL: t.url,
      LOG_LEVEL: "error",
      NODE_ENV: "production",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.5",
      FLOTILLA__SIMULATOR__LATENCY_MS: "5",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let output = "";
  const keep = (d: unknown) => {
    output = (output + String(d)).slice(-20_000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const exited = new Promise<string>((resolve) =>
    child.on("exit", (code, signal) => {
      children.delete(child);
      resolve(signal ?? `code ${code}`);
    }),
  );
  return { child, exited, output: () => output };
}

async function untilAlive(output: () => string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while ((await countLiveWorkers(t.db, 10)) === 0) {
    if (Date.now() > deadline) throw new Error(`the worker did not come up: ${output()}`);
    await sleep(100);
  }
}

async function submit(owner: { userId: string; threadId: string }, key: string): Promise<string> {
  const config = testConfig();
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(config, undefined),
    ...owner,
    input: { submission_key: key, items: ["one", "two"] },
    config,
    model: SIM_MODEL,
  });
  return batch.id;
}

async function untilCompleted(owner: { userId: string; threadId: string }, batchId: string, ms: number, output: () => string): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const b = await getBatch(t.db, { ...owner, batchId });
    if (b.status === "completed") {
      expect(b.succeededCount).toBe(2);
      return;
    }
    if (Date.now() > until) throw new Error(`batch still ${b.status}: ${output().slice(-2_000)}`);
    await sleep(200);
  }
}

/** Holds an EXCLUSIVE lock on subagent_batches in a transaction of its own until `release`. */
async function lockBatches(): Promise<{ release: () => Promise<void> }> {
  const held = await t.sql.reserve();
  await held`begin`;
  await held`lock table subagent_batches in exclusive mode`;
  return {
    release: async () => {
      await held`rollback`;
      held.release();
    },
  };
}

/** The longest any worker session has been waiting on a lock right now, in ms (0: none waits). */
async function longestWorkerLockWait(): Promise<number> {
  const [row] = await t.sql<{ ms: number | null }[]>`
    select max(extract(epoch from clock_timestamp() - state_change) * 1000)::float8 as ms from pg_stat_activity
     where datname = current_database() and application_name = 'flotilla-worker' and wait_event_type = 'Lock'`;
  return row?.ms ?? 0;
}

describe("a worker pass waiting on a lock", () => {
  it("is abandoned at worker_lock_timeout_seconds and logged; the loop goes on and finishes the batch once the lock is gone", async () => {
    const bob = await makeOwner(t.db);
    const batchId = await submit(bob, "bounded");
    const lock = await lockBatches();
    const worker = spawnWorker({ FLOTILLA__SUBAGENT_BATCHES__WORKER_LOCK_TIMEOUT_SECONDS: "1", LOG_LEVEL: "warn" });
    try {
      await untilAlive(worker.output);
      // For 6 s, no worker statement waits on the lock much past its 1 s bound.
      let longest = 0;
      for (const until = Date.now() + 6_000; Date.now() < until; await sleep(100)) longest = Math.max(longest, await longestWorkerLockWait());
      expect(longest, worker.output().slice(-2_000)).toBeGreaterThan(0);
      expect(longest, worker.output().slice(-2_000)).toBeLessThan(2_500);
      // The passes were abandoned, each retried at the next poll in the same process, and the
      // wait on someone else's lock was logged as such (once as it began; again every 30 s).
      expect(worker.output()).toMatch(/waits on a lock another session holds/);
      expect(worker.output()).not.toMatch(/worker pass failed|worker pass abandoned/);
      expect(worker.child.exitCode).toBeNull();
    } finally {
      await lock.release();
    }
    await untilCompleted(bob, batchId, 20_000, worker.output);
    expect(worker.child.exitCode).toBeNull();
    worker.child.kill("SIGTERM");
    expect(await worker.exited).toBe("code 0");
  }, 60_000);
});

describe("a worker whose loop stalls while its heartbeat timer runs", () => {
  it("is ended by its watchdog after worker_stall_seconds, and a new worker finishes every user's batch", async () => {
    const alice = await makeOwner(t.db);
    const bob = await makeOwner(t.db);
    const aliceBatch = await submit(alice, "stalled-a");
    const bobBatch = await submit(bob, "stalled-b");
    const lock = await lockBatches();
    // Bounds far beyond the stall: the pass just waits, as one behind a stuck transaction would.
    const stalled = spawnWorker({
      FLOTILLA__SUBAGENT_BATCHES__WORKER_STATEMENT_TIMEOUT_SECONDS: "120",
      FLOTILLA__SUBAGENT_BATCHES__WORKER_LOCK_TIMEOUT_SECONDS: "120",
      FLOTILLA__SUBAGENT_BATCHES__WORKER_STALL_SECONDS: "4",
      // Its session may still claim once the lock goes (PostgreSQL sees the client gone only then):
      // such leases expire like any dead worker's.
      FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "5",
    });
    let ended: string;
    try {
      await untilAlive(stalled.output);
      const stalledFrom = Date.now();
      ended = await Promise.race([stalled.exited, sleep(25_000).then(() => "still running")]);
      expect(ended, stalled.output().slice(-2_000)).toBe("SIGKILL");
      expect(Date.now() - stalledFrom).toBeGreaterThanOrEqual(2_000);
      expect(stalled.output()).toMatch(/its loop made no progress for \d+ s \(subagent_batches\.worker_stall_seconds 4 s\); exiting for a restart/);
    } finally {
      await lock.release();
    }
    // What `npm start` does next: a new worker. The killed one's leases (if any) expire like any dead worker's.
    const next = spawnWorker({ FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "5" });
    await untilCompleted(bob, bobBatch, 40_000, next.output);
    await untilCompleted(alice, aliceBatch, 40_000, next.output);
    next.child.kill("SIGTERM");
    expect(await next.exited).toBe("code 0");
  }, 120_000);
});
