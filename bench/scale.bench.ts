import { batchSubagent } from "@/server/agent/registry";
import http from "node:http";
import { sql } from "drizzle-orm";
import { configSchema } from "@/lib/config";
import { createApiToken } from "@/server/auth/tokens";
import { claimItems } from "@/server/batches/claim";
import { submitBatch } from "@/server/batches/submit";
import { createDatabase, type Database } from "@/server/db/client";
import { benchServer, freshDatabase, owner, waitTerminal } from "./batch.bench";
import { download, psqlCopy, startWeb, treeRss, type Web } from "./export.bench";
import type { BenchRow } from "./types";
import { processCpuMs, spawnBenchWorkers, stopBenchWorkers, waitForWorkers } from "./workers";

/**
 * A 100,000-item batch through the real batch routes over HTTP (scripts/web.ts as `npm start` runs
 * it: the front door and Next, bench/web.ts; needs `npx next build`) against one PostgreSQL, each part in a
 * fresh database, each row a ratio against a baseline measured in the same run (lower is better):
 *   - NDJSON submission of 100,000 items vs one INSERT ... SELECT FROM unnest of the same rows
 *     into a plain table (uuid primary key) through the driver (target <= 2)
 *   - batch detail, first item page, a `?status=failed` page that matches nothing, and
 *     `?verdict=failed` and `?verdict=passed` pages: the
 *     100,000-item batch vs a 10-item batch (target <= 1.5)
 *   - results.jsonl of the 100,000 items vs psql's COPY (select the same columns) TO STDOUT, what
 *     `\copy ... to stdout` runs (target <= 2); SCALE_EXPORT_ITEMS runs fewer
 *   - results.csv of a typed batch of 100,000 items (three output properties, two checks) vs psql's
 *     COPY (select the same columns) TO STDOUT (format csv) (target <= 2), and the web process's
 *     peak RSS growth during the download vs 64 MB (target <= 1); SCALE_CSV_ITEMS runs fewer
 *   - claim (with promotion of pending rows) of 32 items with 100,000 pending vs 1,000 pending,
 *     in process (target <= 1.3)
 *   - the 100,000 items run by one real worker process with 64 slots (simulator, latency 0),
 *     the batch's own first claim to finish: seconds vs 50 s, i.e. 2,000 items/s (target <= 1),
 *     and the worker's CPU per item (target <= 0.4 ms); SCALE_RUN_ITEMS runs fewer
 * Select parts with SCALE_BENCH=submit,read,export,csv,claim,run (default all).
 */

export const name = "scale";

const BIG = 100_000;
/** SCALE_BENCH_PORT moves the web process (two scale runs at once on one machine). */
const PORT = Number(process.env.SCALE_BENCH_PORT ?? 3223);
const limits = { max_items_per_batch: BIG, max_live_items_per_batch: 10_000, default_max_live_items: 1_000, max_running_items_per_batch: 1_024 };
const cfg = configSchema.parse({
  subagent_batches: limits,
  quotas: { max_queued_items: 100_000_000, max_active_batches: 100_000 },
  simulator: { latency_ms: 0 },
});
/** The same limits for the web process. */
const webEnv = {
  FLOTILLA__SUBAGENT_BATCHES: JSON.stringify(limits),
  FLOTILLA__QUOTAS: JSON.stringify({ max_queued_items: 100_000_000, max_active_batches: 100_000 }),
  FLOTILLA__HTTP: JSON.stringify({ max_body_bytes: 100 * 1024 * 1024 }),
  LOG_LEVEL: "warn",
};
let submissions = 0;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (msg: string) => process.stderr.write(`  scale: ${msg}\n`);

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

const prompt = (i: number) => `Classify record ${i}: ${"lorem ipsum ".repeat(6)}`;
const ndjson = (n: number) => Array.from({ length: n }, (_, i) => `${JSON.stringify({ item_key: `rec-${i}`, prompt: prompt(i) })}\n`).join("");

export type Scope = { userId: string; threadId: string; token: string; database: Database; url: string; web: Web };

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function request(scope: Scope, method: string, path: string, body?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${scope.web.base}/api/threads/${scope.threadId}/subagent-batches${path}`,
      {
        method,
        agent,
        headers: { authorization: `Bearer ${scope.token}`, ...(body === undefined ? {} : { "content-type": "application/x-ndjson" }) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

async function submitHttp(scope: Scope, body: string): Promise<string> {
  const res = await request(scope, "POST", `?submission_key=scale-${++submissions}&max_live_items=1000`, body);
  if (res.status !== 201) throw new Error(`submit: HTTP ${res.status} ${res.text.slice(0, 300)}`);
  return (JSON.parse(res.text) as { id: string }).id;
}

export async function submission(scope: Scope, n = BIG): Promise<BenchRow> {
  const { database } = scope;
  const body = ndjson(n);
  const items = Array.from({ length: n }, (_, i) => ({ item_key: `rec-${i}`, prompt: prompt(i) }));
  await database.sql.unsafe(
    `create table plain_items (id uuid primary key default gen_random_uuid(), batch_id uuid not null, position int not null,
      item_key text not null, prompt text not null, status text not null)`,
  );
  await submitHttp(scope, ndjson(1_000)); // warm-up: module loading, prepared statements
  const ours: number[] = [];
  const plain: number[] = [];
  for (let round = 0; round < 3; round++) {
    ours.push(await timed(() => submitHttp(scope, body)));
    plain.push(
      await timed(
        () => database.sql`insert into plain_items (batch_id, position, item_key, prompt, status)
          select '00000000-0000-0000-0000-000000000000'::uuid, p, k, pr, case when p <= 1000 then 'queued' else 'pending' end
            from unnest(${database.sql.array(items.map((_, i) => i + 1))}::int[], ${database.sql.array(items.map((i) => i.item_key))}::text[],
                        ${database.sql.array(items.map((i) => i.prompt))}::text[]) as t(p, k, pr)`,
      ),
    );
    log(`submit round ${round + 1}: HTTP NDJSON ${ours.at(-1)!.toFixed(0)} ms, INSERT ${plain.at(-1)!.toFixed(0)} ms`);
  }
  const o = median(ours);
  const p = median(plain);
  return {
    metric: `scale: submit ${n} items as NDJSON over HTTP (${(body.length / 1e6).toFixed(0)} MB): ms vs one INSERT ... SELECT FROM unnest of the same rows into a plain table`,
    ours: o,
    baseline: p,
    ratio: o / p,
    target: 2,
  };
}

async function submitInProcess(scope: Scope, n: number, extra: Record<string, unknown> = {}) {
  const items = Array.from({ length: n }, (_, i) => ({ item_key: `rec-${i}`, prompt: prompt(i) }));
  return (
    await submitBatch(scope.database.db, { ...batchSubagent(cfg, undefined),
      userId: scope.userId,
      threadId: scope.threadId,
      input: { submission_key: `scale-${++submissions}`, items, max_live_items: 1_000, ...extra },
      config: cfg,
      model: { name: "simulator", simulator: true },
    })
  ).batch;
}

async function reads(scope: Scope): Promise<BenchRow[]> {
  const { database } = scope;
  const big = await submitInProcess(scope, BIG);
  const small = await submitInProcess(scope, 10);
  // A third finished (one in ten of them with a failed verdict), the rest waiting: what a long run looks like midway.
  for (const b of [big, small])
    await database.db.execute(sql`update subagent_batch_items set status = 'succeeded', result = 'done', preview = 'done', finished_at = now(),
        verdict = case when position % 10 = 3 then 'failed' else 'passed' end
      where batch_id = ${b.id} and position <= (select count(*) / 3 from subagent_batch_items where batch_id = ${b.id})`);
  const get = async (path: string) => {
    const res = await request(scope, "GET", path);
    if (res.status !== 200) throw new Error(`GET ${path}: HTTP ${res.status} ${res.text.slice(0, 300)}`);
  };
  const row = async (metric: string, path: (batchId: string) => string): Promise<BenchRow> => {
    // Warm both paths (plans, caches) before the measured rounds.
    for (let i = 0; i < 20; i++) {
      await get(path(big.id));
      await get(path(small.id));
    }
    const o: number[] = [];
    const b: number[] = [];
    // Alternating, so both sides see the same machine.
    for (let i = 0; i < 200; i++) {
      o.push(await timed(() => get(path(big.id))));
      b.push(await timed(() => get(path(small.id))));
    }
    return { metric: `scale: ${metric} over HTTP: median us, ${BIG}-item batch vs 10-item batch`, ours: median(o) * 1000, baseline: median(b) * 1000, ratio: median(o) / median(b), target: 1.5 };
  };
  return [
    await row("batch detail", (id) => `/${id}`),
    await row("first item page", (id) => `/${id}/items`),
    await row("?status=failed page with no match", (id) => `/${id}/items?status=failed`),
    await row("?verdict=failed page", (id) => `/${id}/items?verdict=failed`),
    await row("?verdict=passed page", (id) => `/${id}/items?verdict=passed`),
  ];
}

export async function exportRow(scope: Scope, n = Number(process.env.SCALE_EXPORT_ITEMS ?? BIG)): Promise<BenchRow> {
  const { database } = scope;
  const big = await submitInProcess(scope, n);
  await database.db.execute(sql`update subagent_batch_items set status = 'succeeded', attempts = 1, input_tokens = 12, output_tokens = 40,
      result = 'Record ' || position || E':\\n' || repeat('classified as routine; ', 10), finished_at = now() where batch_id = ${big.id}`);
  const url = `${scope.web.base}/api/threads/${scope.threadId}/subagent-batches/${big.id}/results.jsonl`;
  // Every column the export writes (issue 44: the review and cache columns joined the export, not the baseline).
  const query = `select item_key, input, position, status, attempts, result, error, expected, output, checks, verdict,
      review_state, review_note, reviewed_output, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens
    from subagent_batch_items where batch_id = '${big.id}' order by position`;
  const ours: number[] = [];
  const copy: number[] = [];
  let bytes = 0;
  await download(url, scope.token); // warm-up
  for (let round = 0; round < 3; round++) {
    const c = await psqlCopy(scope.url, query);
    if (c.lines !== n) throw new Error(`COPY returned ${c.lines} lines`);
    copy.push(c.ms);
    const o = await download(url, scope.token);
    if (o.status !== 200 || o.lines !== n) throw new Error(`export returned ${o.status} with ${o.lines} lines`);
    ours.push(o.ms);
    bytes = o.bytes;
    log(`export round ${round + 1}: results.jsonl ${o.ms.toFixed(0)} ms (${(o.bytes / 1e6).toFixed(0)} MB), COPY ${c.ms.toFixed(0)} ms (${(c.bytes / 1e6).toFixed(0)} MB)`);
  }
  const o = median(ours);
  const c = median(copy);
  return {
    metric: `scale: results.jsonl of ${n} items over HTTP (scripts/web.ts) (${(bytes / 1e6).toFixed(0)} MB): ms vs psql COPY (select the same columns) TO STDOUT`,
    ours: o,
    baseline: c,
    ratio: o / c,
    target: 2,
  };
}

const CSV_ITEMS = Number(process.env.SCALE_CSV_ITEMS ?? BIG);
const RSS_BUDGET_MB = 64;

/** A typed batch as a settlement leaves it: every item an output of three properties, two checks, a verdict. */
async function typedBatch(scope: Scope, n: number) {
  const batch = await submitInProcess(scope, n, {
    output_schema: { type: "object", properties: { label: { type: "string" }, score: { type: "number" }, reason: { type: "string" } } },
    checks: [
      { name: "label_known", type: "regex", pattern: "^(routine|urgent)$", path: "/label" },
      { name: "has_reason", type: "regex", pattern: "\\w", path: "/reason" },
    ],
  });
  await scope.database.db.execute(sql`
    update subagent_batch_items set status = 'succeeded', attempts = 1, input_tokens = 12, output_tokens = 40,
           output = jsonb_build_object('label', case when position % 10 = 0 then 'odd' else 'routine' end,
                                       'score', position % 100, 'reason', 'Record ' || position || ', "classified" as routine'),
           checks = jsonb_build_array(jsonb_build_object('name', 'label_known', 'passed', position % 10 <> 0),
                                      jsonb_build_object('name', 'has_reason', 'passed', true, 'score', 1)),
           verdict = case when position % 10 = 0 then 'failed' else 'passed' end,
           started_at = now() - interval '2 seconds', finished_at = now()
     where batch_id = ${batch.id}`);
  return batch;
}

async function csvRow(scope: Scope): Promise<BenchRow[]> {
  const n = CSV_ITEMS;
  const big = await typedBatch(scope, n);
  const url = `${scope.web.base}/api/threads/${scope.threadId}/subagent-batches/${big.id}/results.csv`;
  const check = (name: string) =>
    `case when checks @> '[{"name":"${name}","passed":false}]' then 'failed' when checks @> '[{"name":"${name}","passed":true}]' then 'passed' else '' end`;
  const query = `select item_key, status, input, output->>'label', output->>'score', output->>'reason', ${check("label_known")}, ${check("has_reason")},
      verdict, attempts, input_tokens, output_tokens, (input_tokens * 0 + output_tokens * 0) / 1000000.0,
      round(extract(epoch from finished_at - started_at) * 1000), error
    from subagent_batch_items where batch_id = '${big.id}' order by position`;
  const ours: number[] = [];
  const copy: number[] = [];
  const growth: number[] = [];
  let bytes = 0;
  await download(url, scope.token); // warm-up
  for (let round = 0; round < 3; round++) {
    const c = await psqlCopy(scope.url, query, "(format csv)");
    if (c.lines !== n) throw new Error(`COPY returned ${c.lines} lines`);
    copy.push(c.ms);
    const before = treeRss(scope.web.pid);
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, treeRss(scope.web.pid));
    }, 25);
    const o = await download(url, scope.token).finally(() => clearInterval(sampler));
    if (o.status !== 200 || o.lines !== n + 1) throw new Error(`results.csv returned ${o.status} with ${o.lines} lines`);
    ours.push(o.ms);
    growth.push((peak - before) / 1048576);
    bytes = o.bytes;
    log(`csv round ${round + 1}: results.csv ${o.ms.toFixed(0)} ms (${(o.bytes / 1e6).toFixed(0)} MB, RSS +${growth[round]!.toFixed(0)} MB), COPY csv ${c.ms.toFixed(0)} ms (${(c.bytes / 1e6).toFixed(0)} MB)`);
  }
  const o = median(ours);
  const c = median(copy);
  const worst = Math.max(...growth);
  return [
    {
      metric: `scale: results.csv of ${n} typed items over HTTP (${(bytes / 1e6).toFixed(0)} MB): ms vs psql COPY (select the same columns) TO STDOUT (format csv)`,
      ours: o,
      baseline: c,
      ratio: o / c,
      target: 2,
    },
    {
      metric: `scale: results.csv of ${n} typed items: worst peak RSS growth of the web process (MB) vs ${RSS_BUDGET_MB} MB`,
      ours: worst,
      baseline: RSS_BUDGET_MB,
      ratio: worst / RSS_BUDGET_MB,
      target: 1,
    },
  ];
}

async function claimRow(scope: Scope): Promise<BenchRow> {
  const { database } = scope;
  const cost = async (n: number) => {
    const b = await submitInProcess(scope, n, { max_running_items: 1_024 });
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
  return { metric: `scale: claim 32 items (promoting pending rows): ms with ${BIG} pending vs 1000 pending`, ours: big, baseline: small, ratio: big / small, target: 1.3 };
}

export async function runRow(scope: Scope, n = Number(process.env.SCALE_RUN_ITEMS ?? BIG)): Promise<BenchRow[]> {
  const workers = spawnBenchWorkers({ databaseUrl: scope.url, count: 1, slots: 64, env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0" } });
  try {
    // Started (modules loaded) before the CPU count begins.
    await waitForWorkers(scope.database.sql, 1);
    const cpuBefore = processCpuMs(workers[0]!.pid!);
    const pgBefore = await workerBackendsCpuMs(scope.database.sql);
    const batch = await submitInProcess(scope, n, { max_running_items: 64 });
    const done = await waitTerminal(scope.database.db, { ...scope, batchId: batch.id }, 30 * 60_000);
    const cpuPerItem = (processCpuMs(workers[0]!.pid!) - cpuBefore) / n;
    const pgAfter = await workerBackendsCpuMs(scope.database.sql);
    const pgPerItem = pgAfter && pgBefore ? [...pgAfter].reduce((ms, [pid, now]) => ms + now - (pgBefore.get(pid) ?? 0), 0) / n : undefined;
    if (done.succeededCount !== n) throw new Error(`run: ${done.succeededCount} of ${n} succeeded (${done.status})`);
    const seconds = (done.finishedAt!.getTime() - done.startedAt!.getTime()) / 1000;
    const ideal = n / 2_000;
    const what = `scale: run ${n} zero-latency items, 1 worker (server/worker/main.ts, simulator) x 64 slots`;
    return [
      {
        metric: `${what} (${(n / seconds).toFixed(0)} items/s): s from first claim to finish vs ${ideal} s (2000 items/s)`,
        ours: seconds,
        baseline: ideal,
        ratio: seconds / ideal,
        target: 1,
      },
      {
        metric: `${what}: worker CPU (user+system, /proc/PID/stat) per item, ms vs 0.4 ms`,
        ours: cpuPerItem,
        baseline: 0.4,
        ratio: cpuPerItem / 0.4,
        target: 1,
      },
      // Two cores at 2,000 items/s leave 1 ms of CPU an item for the worker and PostgreSQL together.
      ...(pgPerItem === undefined
        ? []
        : [
            {
              metric: `${what}: worker CPU + its PostgreSQL backends' CPU (${pgPerItem.toFixed(3)} ms, /proc) per item, ms vs 1 ms (two cores at 2000 items/s)`,
              ours: cpuPerItem + pgPerItem,
              baseline: 1,
              ratio: cpuPerItem + pgPerItem,
              target: 1,
            },
          ]),
    ];
  } finally {
    await stopBenchWorkers(workers);
  }
}

/**
 * CPU so far of each PostgreSQL backend serving the worker (application_name flotilla-worker) in
 * this database, by pid; undefined when the server is not on this machine (no /proc entry).
 */
async function workerBackendsCpuMs(sql: Scope["database"]["sql"]): Promise<Map<number, number> | undefined> {
  const rows = await sql<{ pid: number }[]>`
    select pid from pg_stat_activity where application_name = 'flotilla-worker' and datname = current_database()`;
  const out = new Map<number, number>();
  for (const { pid } of rows) {
    try {
      out.set(pid, processCpuMs(pid));
    } catch {
      return undefined;
    }
  }
  return out;
}

export type ScalePart = (s: Scope) => Promise<BenchRow | BenchRow[]>;

/** Each part in a fresh database (of adminUrl's server, else a new one) with its own web process (scripts/web.ts). */
export async function runParts(parts: ScalePart[], adminUrl?: string, port = PORT): Promise<BenchRow[]> {
  const server = adminUrl ? { adminUrl, stop: async () => {} } : await benchServer();
  const rows: BenchRow[] = [];
  try {
    for (const part of parts) {
      const bdb = await freshDatabase(server.adminUrl);
      const database = createDatabase(bdb.url, { max: 2 });
      const web = await startWeb(bdb.url, { env: webEnv, port });
      try {
        // As a user meets a freshly loaded batch: statistics as the submission leaves them, with
        // no autovacuum analyzing the table behind the bench's back (issue 44: an export planned
        // on a never-analyzed table sorted the whole batch for every page, 2.3x -> 15x COPY).
        await database.sql`alter table subagent_batch_items set (autovacuum_enabled = false)`;
        const { userId, threadId } = await owner(database.db);
        const token = await createApiToken(database.db, { userId });
        rows.push(...[await part({ userId, threadId, token, database, url: bdb.url, web })].flat());
      } finally {
        await web.stop();
        await database.close();
        await bdb.close();
      }
    }
  } finally {
    agent.destroy();
    await server.stop();
  }
  return rows;
}

export async function run(): Promise<BenchRow[]> {
  const all: Record<string, ScalePart> = { submit: submission, read: reads, export: exportRow, csv: csvRow, claim: claimRow, run: runRow };
  const only = new Set((process.env.SCALE_BENCH ?? Object.keys(all).join(",")).split(","));
  return runParts(Object.entries(all).filter(([k]) => only.has(k)).map(([, f]) => f));
}
