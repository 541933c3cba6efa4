import { sql } from "drizzle-orm";
import { configSchema } from "@/lib/config";
import { claimItems } from "@/server/batches/claim";
import { exportResults, getBatch, listItems } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { createDatabase, type Database } from "@/server/db/client";
import { benchServer, freshDatabase, owner } from "./batch.bench";
import type { BenchRow } from "./run";

/**
 * A 100,000-item batch (max_items_per_batch raised to the schema's ceiling for the run), in
 * process against one PostgreSQL, each part in a fresh database. Rows (lower ratio is better):
 *   - submission vs one multi-row INSERT (insert ... select from unnest) of the same rows into a
 *     plain table (target <= 2)
 *   - batch detail read, first item page, and a status-filtered page that matches nothing: the
 *     100,000-item batch vs a 10-item batch (flat: target <= 1.3)
 *   - JSONL export (exportResults, each line serialized) vs COPY (select ...) TO STDOUT of the
 *     same columns (target <= 2, i.e. >= 0.5x COPY's throughput)
 *   - claim of 32 items with 100,000 pending vs 1,000 pending (flat: target <= 1.3)
 * Select parts with SCALE_BENCH=submit,read,export,claim (default all).
 */

export const name = "scale";

const BIG = 100_000;
const cfg = configSchema.parse({
  subagent_batches: { max_items_per_batch: BIG, max_live_items_per_batch: 10_000, default_max_live_items: 1_000, max_running_items_per_batch: 1_024 },
  simulator: { latency_ms: 0 },
});
let submissions = 0;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** Median ms of `rounds` rounds of `reps` calls each. */
async function perCall(fn: () => Promise<unknown>, reps: number, rounds = 7): Promise<number> {
  const out: number[] = [];
  for (let r = 0; r < rounds; r++) out.push((await timed(async () => {
    for (let i = 0; i < reps; i++) await fn();
  })) / reps);
  return median(out);
}

type Scope = { userId: string; threadId: string };

async function submit(database: Database, scope: Scope, n: number, extra: Record<string, unknown> = {}) {
  const items = Array.from({ length: n }, (_, i) => ({ item_key: `rec-${i}`, prompt: `Classify record ${i}: ${"lorem ipsum ".repeat(6)}` }));
  return (
    await submitBatch(database.db, {
      ...scope,
      input: { submission_key: `scale-${++submissions}`, items, max_live_items: 1_000, ...extra },
      config: cfg,
      model: { name: "simulator", simulator: true },
    })
  ).batch;
}

async function submission(database: Database, scope: Scope): Promise<BenchRow> {
  const items = Array.from({ length: BIG }, (_, i) => ({ item_key: `rec-${i}`, prompt: `Classify record ${i}: ${"lorem ipsum ".repeat(6)}` }));
  await database.sql.unsafe(
    `create table plain_items (id uuid primary key default gen_random_uuid(), batch_id uuid not null, position int not null,
      item_key text not null, prompt text not null, status text not null)`,
  );
  const ours: number[] = [];
  const plain: number[] = [];
  for (let round = 0; round < 3; round++) {
    ours.push(
      await timed(() =>
        submitBatch(database.db, {
          ...scope,
          input: { submission_key: `scale-${++submissions}`, items, max_live_items: 1_000 },
          config: cfg,
          model: { name: "simulator", simulator: true },
        }),
      ),
    );
    plain.push(
      await timed(
        () => database.sql`insert into plain_items (batch_id, position, item_key, prompt, status)
          select '00000000-0000-0000-0000-000000000000'::uuid, p, k, pr, case when p <= 1000 then 'queued' else 'pending' end
            from unnest(${database.sql.array(items.map((_, i) => i + 1))}::int[], ${database.sql.array(items.map((i) => i.item_key))}::text[],
                        ${database.sql.array(items.map((i) => i.prompt))}::text[]) as t(p, k, pr)`,
      ),
    );
  }
  const o = median(ours);
  const p = median(plain);
  return { metric: "scale: submit 100000 items: ms vs one multi-row INSERT of the same rows into a plain table", ours: o, baseline: p, ratio: o / p, target: 2 };
}

async function reads(database: Database, scope: Scope): Promise<BenchRow[]> {
  const big = await submit(database, scope, BIG);
  const small = await submit(database, scope, 10);
  // A third finished, the rest waiting: what a long run looks like midway.
  for (const b of [big, small])
    await database.db.execute(sql`update subagent_batch_items set status = 'succeeded', result = 'done', preview = 'done', finished_at = now()
      where batch_id = ${b.id} and position <= (select count(*) / 3 from subagent_batch_items where batch_id = ${b.id})`);
  await database.sql`analyze subagent_batch_items`;
  const row = (metric: string, fn: (batchId: string) => Promise<unknown>): Promise<BenchRow> =>
    (async () => {
      const o = await perCall(() => fn(big.id), 50);
      const b = await perCall(() => fn(small.id), 50);
      return { metric: `scale: ${metric}: us, 100000-item batch vs 10-item batch`, ours: o * 1000, baseline: b * 1000, ratio: o / b, target: 1.3 };
    })();
  return [
    await row("batch detail read", (batchId) => getBatch(database.db, { ...scope, batchId })),
    await row("first item page", (batchId) => listItems(database.db, { ...scope, batchId })),
    await row("status-filtered page with no matches (failed)", (batchId) => listItems(database.db, { ...scope, batchId, status: "failed" })),
  ];
}

async function exportRow(database: Database, scope: Scope): Promise<BenchRow> {
  const big = await submit(database, scope, BIG);
  await database.db.execute(sql`update subagent_batch_items set status = 'succeeded', attempts = 1, input_tokens = 12, output_tokens = 40,
      result = 'Record ' || position || ': ' || repeat('classified as routine; ', 10), finished_at = now() where batch_id = ${big.id}`);
  const ours: number[] = [];
  const copy: number[] = [];
  let bytes = 0;
  for (let round = 0; round < 3; round++) {
    ours.push(
      await timed(async () => {
        bytes = 0;
        for await (const line of await exportResults(database.db, { ...scope, batchId: big.id })) bytes += JSON.stringify(line).length + 1;
      }),
    );
    copy.push(
      await timed(async () => {
        // COPY takes no parameters; the id is a uuid this run created.
        const stream = await database.sql
          .unsafe(`copy (select item_key, position, status, attempts, result, error, input_tokens, output_tokens
            from subagent_batch_items where batch_id = '${big.id}' order by position) to stdout`)
          .readable();
        for await (const _chunk of stream) {
          // drained
        }
      }),
    );
  }
  const o = median(ours);
  const c = median(copy);
  return {
    metric: `scale: JSONL export of 100000 items (${(bytes / 1e6).toFixed(0)} MB): ms vs COPY (select ...) TO STDOUT`,
    ours: o,
    baseline: c,
    ratio: o / c,
    target: 2,
  };
}

async function claimRow(database: Database, scope: Scope): Promise<BenchRow> {
  const cost = async (n: number) => {
    const b = await submit(database, scope, n, { max_running_items: 1_024 });
    await database.sql`analyze subagent_batch_items`;
    const times: number[] = [];
    for (let i = 0; i < 15; i++) {
      times.push(await timed(() => claimItems(database.db, { workerId: `bench-claim-${b.id}`, limit: 32, leaseSeconds: 600 })));
    }
    // Park the batch so the next measurement claims only from its own.
    await database.db.execute(sql`update subagent_batches set status = 'paused' where id = ${b.id}`);
    return median(times.slice(2));
  };
  const small = await cost(1_000);
  const big = await cost(BIG);
  return { metric: "scale: claim 32 items: ms with 100000 pending vs 1000 pending", ours: big, baseline: small, ratio: big / small, target: 1.3 };
}

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const rows: BenchRow[] = [];
  const all = { submit: submission, read: reads, export: exportRow, claim: claimRow };
  const only = new Set((process.env.SCALE_BENCH ?? Object.keys(all).join(",")).split(","));
  const parts = Object.entries(all)
    .filter(([k]) => only.has(k))
    .map(([, f]) => f as (d: Database, s: Scope) => Promise<BenchRow | BenchRow[]>);
  try {
    for (const part of parts) {
      const bdb = await freshDatabase(server.adminUrl);
      const database = createDatabase(bdb.url, { max: 2 });
      try {
        const scope = await owner(database.db);
        rows.push(...[await part(database, scope)].flat());
      } finally {
        await database.close();
        await bdb.close();
      }
    }
  } finally {
    await server.stop();
  }
  return rows;
}
