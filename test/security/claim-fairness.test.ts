import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { SubmitBatchInput } from "@/lib/api/batches";
import { claimItems, markRunning, recoverExpiredLeases, recoverLeasesOfPreviousRun } from "@/server/batches/claim";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { counterDrift, itemsOf, makeOwner, SIM_MODEL, sleep, testConfig } from "../batches/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/**
 * The claim SQL (drizzle/0002_security_sql.sql): user-first fair share, and lease recovery that
 * gives back the attempt of an item whose lease expired before it ever started.
 */

let t: TestDatabase;
let key = 0;
const config = testConfig({ subagent_batches: { max_attempts: 1 } });

beforeAll(async () => {
  t = await createTestDatabase();
});

beforeEach(async () => {
  // Each test owns the queue.
  await t.db.execute(sql`update subagent_batches set status = 'cancelled' where status in ('queued', 'running', 'paused')`);
});

async function submit(owner: { userId: string; threadId: string }, n: number, extra: Partial<SubmitBatchInput> = {}) {
  key += 1;
  const items = Array.from({ length: n }, (_, i) => `item ${i}`);
  const { batch } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
    ...owner,
    input: { submission_key: `k-${key}`, items, max_running_items: 8, max_live_items: 50, ...extra },
    config,
    model: SIM_MODEL,
  });
  return batch;
}

describe("user-first fair share", () => {
  it("splits free slots between users first: one small batch is not starved by another user's four large ones", async () => {
    const a = await makeOwner(t.db);
    const b = await makeOwner(t.db);
    const big = [];
    for (let i = 0; i < 4; i++) big.push(await submit(a, 40));
    const small = await submit(b, 4);

    const claimed = await claimItems(t.db, { workerId: "w1", limit: 4, leaseSeconds: 30 });
    const perBatch = new Map<string, number>();
    for (const c of claimed) perBatch.set(c.batchId, (perBatch.get(c.batchId) ?? 0) + 1);
    // Batch-first would give user B one slot in five; user-first gives it half.
    expect(perBatch.get(small.id)).toBe(2);
    expect(big.reduce((n, x) => n + (perBatch.get(x.id) ?? 0), 0)).toBe(2);

    // The next claim rotates: user B's remaining room (2) is still half the slots.
    const next = await claimItems(t.db, { workerId: "w1", limit: 4, leaseSeconds: 30 });
    expect(next.filter((c) => c.batchId === small.id)).toHaveLength(2);
    // With B out of work, every slot goes to A, spread over A's batches.
    const rest = await claimItems(t.db, { workerId: "w1", limit: 8, leaseSeconds: 30 });
    expect(rest.every((c) => c.batchId !== small.id)).toBe(true);
    expect(rest).toHaveLength(8);
    const counts = big.map((x) => rest.filter((c) => c.batchId === x.id).length + claimed.concat(next).filter((c) => c.batchId === x.id).length);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    for (const x of [...big, small]) expect(await counterDrift(t.db, x.id)).toEqual({});
  });

  it("a user's room is capped by each batch's running limit (exact, never exceeded)", async () => {
    const a = await makeOwner(t.db);
    const b = await makeOwner(t.db);
    const limited = await submit(a, 30, { max_running_items: 2 });
    const other = await submit(b, 30, { max_running_items: 3 });
    const claimed = await claimItems(t.db, { workerId: "w1", limit: 16, leaseSeconds: 30 });
    expect(claimed.filter((c) => c.batchId === limited.id)).toHaveLength(2);
    expect(claimed.filter((c) => c.batchId === other.id)).toHaveLength(3);
    expect(await claimItems(t.db, { workerId: "w2", limit: 16, leaseSeconds: 30 })).toEqual([]);
  });
});

describe("lease recovery counts only execution that started", () => {
  it("a lease that expired while leased goes back to queued with its attempt, and never fails the item", async () => {
    const a = await makeOwner(t.db);
    const batch = await submit(a, 1); // max_attempts 1
    for (let round = 0; round < 3; round++) {
      const [c] = await claimItems(t.db, { workerId: `w${round}`, limit: 1, leaseSeconds: 0.1 });
      expect(c!.attempt).toBe(1);
      await sleep(150);
      expect(await recoverExpiredLeases(t.db)).toEqual({ requeued: 1, failed: 0 });
      const [row] = await itemsOf(t.db, batch.id);
      expect(row).toMatchObject({ status: "queued", attempts: 0, lease_owner: null });
      expect(row!.error).toMatch(/before the item started.*attempt not counted/);
    }
    // Once it really runs, the expiry consumes the (only) attempt and fails it.
    const [c] = await claimItems(t.db, { workerId: "w9", limit: 1, leaseSeconds: 0.1 });
    await markRunning(t.db, { workerId: "w9", leaseSeconds: 0.1, items: [c!] });
    await sleep(150);
    expect(await recoverExpiredLeases(t.db)).toEqual({ requeued: 0, failed: 1 });
    const [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ status: "failed", attempts: 1 });
    expect((await getBatch(t.db, { ...a, batchId: batch.id })).status).toBe("failed");
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });
});

describe("npm start on the embedded database", () => {
  it("returns the previous run's leases to the queue at boot and marks its workers stopped", async () => {
    const a = await makeOwner(t.db);
    const batch = await submit(a, 4, { max_running_items: 4 });
    const claimed = await claimItems(t.db, { workerId: "gone-worker", limit: 4, leaseSeconds: 120 });
    await markRunning(t.db, { workerId: "gone-worker", leaseSeconds: 120, items: claimed.slice(0, 2) });
    await t.db.execute(sql`insert into worker_heartbeats (id, host, pid, version, capacity) values ('gone-worker', 'h', 1, 'v', 4)`);
    // Earlier tests' leftovers in this database are recovered too; this batch's four are among them.
    expect((await recoverLeasesOfPreviousRun(t.db)).requeued).toBeGreaterThanOrEqual(4);
    const rows = await itemsOf(t.db, batch.id);
    // Nothing is left leased. The two that never started keep their attempt and are queued; the
    // two that had started used theirs (max_attempts is 1 in this suite, so they fail).
    expect(rows.map((r) => [r.status, r.attempts, r.lease_owner]).sort()).toEqual([
      ["failed", 1, null],
      ["failed", 1, null],
      ["queued", 0, null],
      ["queued", 0, null],
    ]);
    const [hb] = await t.db.execute<{ stopped: boolean }>(sql`select stopped_at is not null as stopped from worker_heartbeats where id = 'gone-worker'`);
    expect(hb!.stopped).toBe(true);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });
});
