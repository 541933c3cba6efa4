import { batchSubagent } from "@/server/agent/registry";
import type { ChildProcess } from "node:child_process";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnBenchWorkers, stopBenchWorkers } from "@/bench/workers";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { listWorkers } from "@/server/ops/workers";
import { counterDrift, itemsOf, makeOwner, SIM_MODEL, sleep, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/**
 * Clean shutdown with real worker processes (`server/worker/main.ts`): SIGTERM mid-batch hands
 * the running rows back to `queued` at once, so the batch finishes without waiting a lease.
 */

const LEASE_SECONDS = 60;
let t: TestDatabase;
const children: ChildProcess[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
});

function spawnWorker(): ChildProcess {
  const [child] = spawnBenchWorkers({
    databaseUrl: t.url,
    count: 1,
    slots: 3,
    env: {
      FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: String(LEASE_SECONDS),
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.2",
      FLOTILLA__SIMULATOR__LATENCY_MS: "10",
    },
  });
  children.push(child!);
  return child!;
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe("SIGTERM mid-batch", () => {
  it("hands running rows back at once (attempt restored), marks the worker stopped, and the batch finishes without waiting a lease", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submitBatch(t.db, {
      ...owner,
      input: {
        submission_key: "shutdown",
        items: Array.from({ length: 6 }, (_, i) => `slow ${i} [[sleep:3000]]`),
        max_running_items: 3,
      },
      config: testConfig({ subagent_batches: { lease_seconds: LEASE_SECONDS } }),
      ...batchSubagent(testConfig(), undefined),
      model: SIM_MODEL,
    });
    const first = spawnWorker();
    await waitFor("three running", async () => (await getBatch(t.db, { ...owner, batchId: batch.id })).runningCount === 3);
    const [{ id: firstId } = { id: "" }] = await t.db.execute<{ id: string }>(
      sql`select distinct lease_owner as id from subagent_batch_items where batch_id = ${batch.id} and status = 'running'`,
    );

    const sigterm = Date.now();
    await stopBenchWorkers([first]);
    const exitMs = Date.now() - sigterm;
    expect(first.exitCode).toBe(0);
    // Handed back before the process exited: nothing leased, nothing running, no attempt used.
    const rows = await itemsOf(t.db, batch.id);
    expect(rows.filter((r) => r.status === "queued")).toHaveLength(6);
    expect(rows.every((r) => r.attempts === 0 && r.lease_owner === null)).toBe(true);
    expect(await counterDrift(t.db, batch.id)).toEqual({});

    const [worker] = (await listWorkers(t.db, { userId: owner.userId, livenessSeconds: 10 })).filter((w) => w.id === firstId);
    expect(worker).toMatchObject({ alive: false, stopped_at: expect.any(String) });

    spawnWorker();
    const done = await waitFor(
      "the batch to complete",
      async () => {
        const b = await getBatch(t.db, { ...owner, batchId: batch.id });
        return b.status === "completed" ? b : undefined;
      },
      LEASE_SECONDS * 1000,
    );
    const totalMs = Date.now() - sigterm;
    expect(done.succeededCount).toBe(6);
    // Two rounds of 3 s items plus a worker start: far below one 60 s lease.
    expect(totalMs).toBeLessThan(LEASE_SECONDS * 1000 * 0.4);
    const history = await t.db.execute<{ outcome: string; n: number }>(
      sql`select outcome, count(*)::int as n from subagent_batch_item_attempts where batch_id = ${batch.id} group by outcome order by outcome`,
    );
    expect(history.map((h) => [h.outcome, h.n])).toEqual([
      ["released", 3],
      ["succeeded", 6],
    ]);
    console.log(`SIGTERM → exit ${exitMs} ms; SIGTERM → batch completed ${totalMs} ms (lease ${LEASE_SECONDS} s)`);
  }, 90_000);
});
