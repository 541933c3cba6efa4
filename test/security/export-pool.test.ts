import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXPORT_POOL_SIZE, exportPool } from "@/server/http/export";
import { exportsInFlight } from "@/server/instruments";
import { call, makeThread, makeUser, setupApiDatabase, workerAlive } from "../api/helpers";

/** Slow readers of the exports (JSONL, CSV) occupy only the exports' own pool: every other request keeps answering. */

const tdb = await setupApiDatabase();

afterAll(async () => {
  await exportPool().end({ timeout: 5 });
});

let user: Awaited<ReturnType<typeof makeUser>>;
let threadId: string;
let batchId: string;

beforeAll(async () => {
  await workerAlive(tdb);
  user = await makeUser(tdb, "export");
  threadId = await makeThread(tdb, user);
  const res = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
    token: user.token,
    json: { submission_key: "big", items: Array.from({ length: 200 }, (_, i) => `item ${i}`) },
  });
  batchId = (await res.json()).id;
  // Large stored results so one fetch fills the stream's buffer and the export waits for the reader.
  await tdb.db.execute(sql`update subagent_batch_items set status = 'succeeded', result = repeat('r', 50000) where batch_id = ${batchId}`);
});

describe("exports on their own pool", () => {
  // More stalled readers than the main pool has connections (10): on one shared pool, every other request would wait.
  it(`12 clients that never read hold at most ${EXPORT_POOL_SIZE} connections, and other requests answer at once`, async () => {
    const aborts: AbortController[] = [];
    const stalled: Response[] = [];
    for (let i = 0; i < 12; i++) {
      const abort = new AbortController();
      aborts.push(abort);
      // results.jsonl and results.csv alike: one stream machinery, one pool.
      const file = i % 2 ? "results.csv" : "results.jsonl";
      const res = await call("GET", `/api/threads/${threadId}/subagent-batches/${batchId}/${file}`, { token: user.token, signal: abort.signal });
      expect(res.status).toBe(200);
      stalled.push(res); // body never read
    }
    await new Promise((r) => setTimeout(r, 300));
    const [held] = await tdb.db.execute<{ n: number }>(
      sql`select count(*)::int as n from pg_stat_activity where application_name = 'flotilla-export' and datname = current_database()`,
    );
    expect(held!.n).toBeGreaterThan(0);
    expect(held!.n).toBeLessThanOrEqual(EXPORT_POOL_SIZE);

    // The main pool (10 connections) is untouched: 20 reads in parallel answer promptly.
    const started = Date.now();
    const reads = await Promise.all(
      Array.from({ length: 20 }, () => call("GET", `/api/threads/${threadId}/subagent-batches/${batchId}`, { token: user.token })),
    );
    expect(reads.every((r) => r.status === 200)).toBe(true);
    expect(Date.now() - started).toBeLessThan(3_000);

    for (const a of aborts) a.abort();
    for (const r of stalled) await r.body?.cancel().catch(() => {});
    // Cancelled downloads end, queued ones included, and give their snapshots back at once.
    await expect.poll(() => exportsInFlight(), { timeout: 5_000, interval: 50 }).toBe(0);
    const [open] = await tdb.db.execute<{ n: number }>(
      sql`select count(*)::int as n from pg_stat_activity
           where application_name = 'flotilla-export' and datname = current_database() and state <> 'idle'`,
    );
    expect(open!.n).toBe(0);
  });
});
