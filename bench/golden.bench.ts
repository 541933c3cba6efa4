import http from "node:http";
import { sql } from "drizzle-orm";
import { batchSubagent } from "@/server/agent/registry";
import { submitBatch } from "@/server/batches/submit";
import { configSchema } from "@/lib/config";
import { treeRss } from "./export.bench";
import { runParts, type Scope } from "./scale.bench";
import type { BenchRow } from "./types";

/**
 * `npm run bench -- golden`: a golden set of 100,000 items made from a reviewed 100,000-item batch
 * (DESIGN "Reviews that teach"), through `POST /api/golden-sets { from_batch }` over HTTP to
 * scripts/web.ts as `npm start` runs it (bench/web.ts; needs `npx next build`), in a fresh
 * database (bench/scale.bench.ts runParts). The batch is loaded as scale.bench loads its big
 * batches (the writer in process, then one UPDATE settles and reviews every item: one in ten
 * corrected by the person, the rest accepted). Rows (lower is better):
 *   - ms to make the set over HTTP vs the same rows copied by one INSERT ... SELECT through the
 *     driver into a plain table with the same primary key (target <= 2)
 *   - the web process's worst peak RSS growth while it makes the set vs 64 MB (target <= 1): the
 *     rows go from table to table inside PostgreSQL, none through the process
 * GOLDEN_ITEMS runs fewer items; GOLDEN_WEB_PORT moves the web process (default 3224).
 */

export const name = "golden";

const N = Number(process.env.GOLDEN_ITEMS ?? 100_000);
const ROUNDS = 3;
const RSS_BUDGET_MB = 64;
const cfg = configSchema.parse({
  subagent_batches: { max_items_per_batch: 100_000, max_live_items_per_batch: 10_000, default_max_live_items: 1_000 },
  quotas: { max_queued_items: 100_000_000, max_active_batches: 100_000 },
});
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (msg: string) => process.stderr.write(`  golden: ${msg}\n`);

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function post(scope: Scope, path: string, json: unknown): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${scope.web.base}${path}`,
      { method: "POST", agent, headers: { authorization: `Bearer ${scope.token}`, "content-type": "application/json" } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(json));
  });
}

/** A finished batch of n items, every one reviewed: each tenth corrected by the person, the others accepted. */
async function reviewedBatch(scope: Scope, n: number): Promise<string> {
  const items = Array.from({ length: n }, (_, i) => ({ item_key: `rec-${i}`, prompt: `Classify record ${i}: ${"lorem ipsum ".repeat(6)}` }));
  const { batch } = await submitBatch(scope.database.db, {
    ...batchSubagent(cfg, undefined),
    userId: scope.userId,
    threadId: scope.threadId,
    input: { submission_key: "golden-source", items, max_live_items: 1_000 },
    config: cfg,
    model: { name: "simulator", simulator: true },
  });
  await scope.database.db.execute(sql`
    update subagent_batch_items set status = 'succeeded', attempts = 1, finished_at = now(),
           result = 'Record ' || position || ': routine', preview = 'Record ' || position || ': routine',
           review_state = 'accepted', reviewed_at = now(), review_version = 1,
           reviewed_output = case when position % 10 = 0 then to_jsonb('Record ' || position || ': urgent') end
     where batch_id = ${batch.id}`);
  return batch.id;
}

async function goldenPart(scope: Scope): Promise<BenchRow[]> {
  const { database } = scope;
  const batchId = await reviewedBatch(scope, N);
  log(`loaded a reviewed batch of ${N} items`);
  await database.sql.unsafe(
    `create table plain_golden (set_id uuid not null, item_key text not null, added_in int not null, replaced_in int, input text, fields jsonb,
      expected jsonb not null, source_batch_id uuid, source_item_id uuid, decision text, primary key (set_id, item_key, added_in))`,
  );
  // Warm-up: module loading and plans, on a small batch.
  const warm = await reviewedBatchSmall(scope);
  const w = await post(scope, "/api/golden-sets", { name: "warm-up", from_batch: { batch_id: warm } });
  if (w.status !== 201) throw new Error(`warm-up: HTTP ${w.status} ${w.text.slice(0, 300)}`);

  const ours: number[] = [];
  const plain: number[] = [];
  const growth: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const before = treeRss(scope.web.pid);
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, treeRss(scope.web.pid));
    }, 25);
    const t0 = performance.now();
    const res = await post(scope, "/api/golden-sets", { name: `reviewed ${round + 1}`, from_batch: { batch_id: batchId } }).finally(() => clearInterval(sampler));
    ours.push(performance.now() - t0);
    if (res.status !== 201) throw new Error(`create: HTTP ${res.status} ${res.text.slice(0, 300)}`);
    const made = JSON.parse(res.text) as { items: number };
    if (made.items !== N) throw new Error(`the set holds ${made.items} items, not ${N}`);
    growth.push((peak - before) / 1048576);

    await database.sql`truncate plain_golden`;
    const p0 = performance.now();
    await database.sql`
      insert into plain_golden (set_id, item_key, added_in, replaced_in, input, fields, expected, source_batch_id, source_item_id, decision)
      select gen_random_uuid(), i.item_key, 1, null, i.input, null, coalesce(i.reviewed_output, i.output, to_jsonb(i.result)), i.batch_id, i.id,
             case when i.reviewed_output is not null then 'corrected' else 'accepted' end
        from subagent_batch_items i where i.batch_id = ${batchId} and i.review_state in ('accepted', 'rejected')`;
    plain.push(performance.now() - p0);
    log(`round ${round + 1}: POST /api/golden-sets ${ours.at(-1)!.toFixed(0)} ms (RSS +${growth.at(-1)!.toFixed(1)} MB), INSERT ... SELECT ${plain.at(-1)!.toFixed(0)} ms`);
  }
  const o = median(ours);
  const p = median(plain);
  const worst = Math.max(...growth);
  return [
    {
      metric: `golden: a golden set of ${N} items from a reviewed ${N}-item batch, POST /api/golden-sets over HTTP (scripts/web.ts): ms vs one INSERT ... SELECT of the same rows into a plain table`,
      ours: o,
      baseline: p,
      ratio: o / p,
      target: 2,
    },
    {
      metric: `golden: a golden set of ${N} items: worst peak RSS growth of the web process (MB) vs ${RSS_BUDGET_MB} MB`,
      ours: worst,
      baseline: RSS_BUDGET_MB,
      ratio: worst / RSS_BUDGET_MB,
      target: 1,
    },
  ];
}

/** Ten reviewed items, for the warm-up. */
async function reviewedBatchSmall(scope: Scope): Promise<string> {
  const { batch } = await submitBatch(scope.database.db, {
    ...batchSubagent(cfg, undefined),
    userId: scope.userId,
    threadId: scope.threadId,
    input: { submission_key: "golden-warm", items: Array.from({ length: 10 }, (_, i) => `warm ${i}`), prompt_template: "Classify {{item}}" },
    config: cfg,
    model: { name: "simulator", simulator: true },
  });
  await scope.database.db.execute(sql`
    update subagent_batch_items set status = 'succeeded', result = 'ok', finished_at = now(), review_state = 'accepted', reviewed_at = now()
     where batch_id = ${batch.id}`);
  return batch.id;
}

export async function run(): Promise<BenchRow[]> {
  try {
    // Its own port (GOLDEN_WEB_PORT), beside scale.bench's web process.
    return await runParts([goldenPart], undefined, Number(process.env.GOLDEN_WEB_PORT ?? 3224));
  } finally {
    agent.destroy();
  }
}
