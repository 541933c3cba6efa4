import { batchSubagent } from "@/server/agent/registry";
import { type ChildProcess, spawn } from "node:child_process";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { countLiveWorkers } from "@/server/runtime/heartbeat";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/**
 * A worker whose passes keep failing does not hide it (DESIGN "Holding under abuse (third
 * round)"): from the first failed pass its heartbeat goes silent, so it no longer reads as alive,
 * and after 60 s of failures the process exits non-zero, which `npm start` answers by starting a
 * new one. Proven with a real worker process whose claims PostgreSQL refuses (a trigger). A lock
 * another session holds for longer than that is no failure of the worker: it waits it out, alive,
 * without a restart loop (a real second connection holds `lock table`).
 */

let t: TestDatabase;
/** The lock test's own database (the first test leaves a trigger behind if it fails). */
let l: TestDatabase;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  t = await createTestDatabase();
  l = await createTestDatabase();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
});

/** A worker process as `npm start` runs one; `output()`: the end of its log (stdout and stderr). */
function spawnWorker(
  url = t.url,
  extraEnv: Record<string, string> = {},
): { child: ChildProcess; exited: Promise<number | null>; output: () => string } {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    env: {
      ...base,
      DATABASE_URL: url,
      LOG_LEVEL: "error",
      NODE_ENV: "production",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.5",
      FLOTILLA__SIMULATOR__LATENCY_MS: "5",
      ...extraEnv,
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
  const exited = new Promise<number | null>((resolve) =>
    child.on("exit", (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  return { child, exited, output: () => output };
}

describe("a worker whose passes keep failing", () => {
  it("goes silent at once, exits with 1 after 60 s, and a new worker finishes the work", async () => {
    const owner = await makeOwner(t.db);
    const config = testConfig();
    const first = spawnWorker();
    const deadline = Date.now() + 30_000;
    while ((await countLiveWorkers(t.db, 10)) === 0) {
      if (Date.now() > deadline) throw new Error(`the worker did not come up: ${first.output()}`);
      await sleep(100);
    }
    // Every claim is refused from now on: each pass of this worker fails.
    await t.db.execute(sql.raw(`create function refuse_claims() returns trigger language plpgsql as $$
      begin raise exception 'claims refused by the test'; end $$`));
    await t.db.execute(sql`create trigger refuse_claims before update on subagent_batch_items
      for each row when (new.status = 'leased') execute function refuse_claims()`);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "stuck", items: ["one", "two"] },
      config,
      model: SIM_MODEL,
    });
    const failingFrom = Date.now();

    // Its heartbeat (every 2 s) stopped with the first failed pass: within the 10 s liveness window
    // plus one beat it no longer reads as alive, while the process still runs.
    await sleep(13_000);
    expect(await countLiveWorkers(t.db, 10)).toBe(0);
    expect(first.child.exitCode).toBeNull();

    const code = await Promise.race([first.exited, sleep(80_000).then(() => "still running" as const)]);
    expect(code, first.output().slice(-2_000)).toBe(1);
    expect(Date.now() - failingFrom).toBeGreaterThanOrEqual(59_000);
    expect(first.output()).toMatch(/passes failing for 6\d s; exiting with 1/);

    // What `npm start` does next: a new worker; with the database taking claims again, it finishes the batch.
    await t.db.execute(sql`drop trigger refuse_claims on subagent_batch_items`);
    const second = spawnWorker();
    const until = Date.now() + 30_000;
    let done = await getBatch(t.db, { ...owner, batchId: batch.id });
    while (done.status !== "completed") {
      if (Date.now() > until) throw new Error(`batch still ${done.status}: ${second.output()}`);
      await sleep(200);
      done = await getBatch(t.db, { ...owner, batchId: batch.id });
    }
    expect(done.succeededCount).toBe(2);
    second.child.kill("SIGTERM");
    expect(await second.exited).toBe(0);
  }, 150_000);
});

describe("a worker whose passes wait on a lock another session holds", () => {
  it("waits it out past the 60 s restart window, heartbeating, and goes on working once the lock is released", async () => {
    const owner = await makeOwner(l.db);
    const config = testConfig();
    // Passes give up on a lock after 1 s (subagent_batches.worker_lock_timeout_seconds), so the
    // worker meets the lock at every poll; LOG_LEVEL warn shows what it says about it.
    const worker = spawnWorker(l.url, { FLOTILLA__SUBAGENT_BATCHES__WORKER_LOCK_TIMEOUT_SECONDS: "1", LOG_LEVEL: "warn" });
    const up = Date.now() + 30_000;
    while ((await countLiveWorkers(l.db, 10)) === 0) {
      if (Date.now() > up) throw new Error(`the worker did not come up: ${worker.output()}`);
      await sleep(100);
    }

    // Work under way: items of 1.5 s each, three at a time; the rest wait in the queue.
    const { batch } = await submitBatch(l.db, {
      ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "under-the-lock", items: Array.from({ length: 8 }, (_, i) => `[[sleep:1500]] item ${i}`) },
      config,
      model: SIM_MODEL,
    });
    const running = Date.now() + 30_000;
    while ((await getBatch(l.db, { ...owner, batchId: batch.id })).runningCount === 0) {
      if (Date.now() > running) throw new Error(`no item started: ${worker.output()}`);
      await sleep(100);
    }

    // A second session (psql, a migration, a person's `lock table`) holds the items' table for 85 s:
    // the running items end meanwhile, and no pass can settle them or claim the next.
    const holder = postgres(l.url, { max: 1, onnotice: () => {} });
    let locked!: () => void;
    const lockTaken = new Promise<void>((resolve) => (locked = resolve));
    const held = holder.begin(async (tx) => {
      await tx`lock table subagent_batch_items in exclusive mode`;
      locked();
      await sleep(85_000);
    });
    await lockTaken;
    const heldFrom = Date.now();
    try {
      // Every pass now gives up on the lock. Past the 60 s after which failing passes end the
      // process, it is still there, and alive, and it said whose lock it waits on.
      while (Date.now() - heldFrom < 78_000) {
        expect(worker.child.exitCode, worker.output().slice(-2_000)).toBeNull();
        await sleep(1_000);
      }
      expect(await countLiveWorkers(l.db, 10)).toBe(1);
      expect(worker.output()).toMatch(/waits on a lock another session holds/);
      expect(worker.output()).not.toMatch(/passes failing/);
    } finally {
      await held;
      await holder.end({ timeout: 5 });
    }

    // The lock is gone: the same process settles what ended and runs the rest.
    const until = Date.now() + 30_000;
    let done = await getBatch(l.db, { ...owner, batchId: batch.id });
    while (done.status !== "completed") {
      if (Date.now() > until) throw new Error(`batch still ${done.status}: ${worker.output()}`);
      await sleep(200);
      done = await getBatch(l.db, { ...owner, batchId: batch.id });
    }
    expect(done.succeededCount).toBe(8);
    expect(worker.child.exitCode).toBeNull();
    worker.child.kill("SIGTERM");
    expect(await worker.exited).toBe(0);
  }, 150_000);
});
