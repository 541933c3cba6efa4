import http from "node:http";
import { sql } from "drizzle-orm";
import type { Check } from "@/lib/api/batch-data";
import { createApiToken } from "@/server/auth/tokens";
import { createDatabase, type Database } from "@/server/db/client";
import { benchServer, freshDatabase, owner, waitTerminal } from "./batch.bench";
import { startWeb, type Web } from "./export.bench";
import type { BenchRow } from "./types";
import { spawnBenchWorkers, stopBenchWorkers } from "./workers";

/**
 * Batches that produce data (issue 25), end to end: a batch submitted as JSON over HTTP (the real
 * submit route through scripts/web.ts, as `npm start` runs it), run by one real worker process (64 slots, the
 * sub-agent executor, the simulator at latency 0), polled to the end.
 *   typed + checked: object items `{ text, expected }`, an output_schema (a small object), a regex
 *   check on `/label` and an equals check of `/label` against the item's expected
 *   plain: the same number of string items, no schema, no checks
 * Both in the same run and the same database, alternating (plain, typed, plain, typed, ...) after a
 * warm-up of each; time = the batch's first claim to its finish. The row: typed seconds vs plain
 * seconds, target <= 1.25 (typed items/s at least 0.8 x plain). DATA_BENCH_ITEMS (default 10,000)
 * and DATA_BENCH_ROUNDS (default 3) size it.
 */

export const name = "data";

const ITEMS = Number(process.env.DATA_BENCH_ITEMS ?? 10_000);
const ROUNDS = Number(process.env.DATA_BENCH_ROUNDS ?? 3);
const PORT = 3224;
const limits = { max_items_per_batch: Math.max(ITEMS, 10_000), max_live_items_per_batch: 10_000, default_max_live_items: 1_000, max_running_items_per_batch: 1_024 };
const webEnv = {
  FLOTILLA__SUBAGENT_BATCHES: JSON.stringify(limits),
  FLOTILLA__QUOTAS: JSON.stringify({ max_queued_items: 100_000_000, max_active_batches: 100_000 }),
  FLOTILLA__HTTP: JSON.stringify({ max_body_bytes: 100 * 1024 * 1024 }),
  LOG_LEVEL: "warn",
};
const LABELS = ["positive", "negative", "neutral"];
const OUTPUT_SCHEMA = {
  type: "object",
  properties: {
    label: { type: "string", enum: LABELS },
    confidence: { type: "number", minimum: 0, maximum: 1 },
    summary: { type: "string", maxLength: 80 },
  },
  required: ["label", "confidence", "summary"],
  additionalProperties: false,
};
const CHECKS: Check[] = [
  { name: "label_known", type: "regex", pattern: "^(positive|negative|neutral)$", path: "/label" },
  { name: "label_matches", type: "equals", path: "/label" },
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (msg: string) => process.stderr.write(`  data: ${msg}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const review = (i: number) => `Review ${i}: the delivery was quick and the product works as described, ${"mostly ".repeat(4)}fine.`;

type Scope = { userId: string; threadId: string; token: string; database: Database; web: Web };
let submissions = 0;
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function post(scope: Scope, body: unknown): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${scope.web.base}/api/threads/${scope.threadId}/subagent-batches`,
      { method: "POST", agent, headers: { authorization: `Bearer ${scope.token}`, "content-type": "application/json" } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

/** One batch over HTTP, run to the end by the worker: seconds from its first claim to its finish. */
async function runBatch(scope: Scope, kind: "typed" | "plain", n: number): Promise<number> {
  const common = { submission_key: `data-${++submissions}`, max_running_items: 64, max_live_items: 1_000 };
  const body =
    kind === "plain"
      ? { ...common, items: Array.from({ length: n }, (_, i) => review(i)), prompt_template: "Classify: {{item}}" }
      : {
          ...common,
          items: Array.from({ length: n }, (_, i) => ({ item_key: `r-${i}`, text: review(i), expected: { label: LABELS[0] } })),
          prompt_template: "Classify: {{text}}",
          output_schema: OUTPUT_SCHEMA,
          checks: CHECKS,
        };
  const res = await post(scope, body);
  if (res.status !== 201) throw new Error(`submit ${kind}: HTTP ${res.status} ${res.text.slice(0, 300)}`);
  const batchId = (JSON.parse(res.text) as { id: string }).id;
  const done = await waitTerminal(scope.database.db, { userId: scope.userId, threadId: scope.threadId, batchId }, 30 * 60_000);
  if (done.succeededCount !== n) throw new Error(`${kind}: ${done.succeededCount} of ${n} succeeded (${done.status})`);
  if (kind === "typed") {
    // The typed run did what it claims: every item has its output and a verdict.
    const [row] = await scope.database.db.execute<{ typed: number; verdicts: number }>(sql`
      select count(*) filter (where output is not null)::int as typed, count(*) filter (where verdict is not null)::int as verdicts
        from subagent_batch_items where batch_id = ${batchId}`);
    if (row!.verdicts !== n) throw new Error(`typed: ${row!.verdicts} of ${n} items have a verdict`);
    if (row!.typed !== n) log(`typed: only ${row!.typed} of ${n} items have an output (is the executor's structured output in?)`);
  }
  return (done.finishedAt!.getTime() - done.startedAt!.getTime()) / 1000;
}

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const bdb = await freshDatabase(server.adminUrl);
  const database = createDatabase(bdb.url, { max: 2 });
  const web = await startWeb(bdb.url, { env: webEnv, port: PORT });
  const workers = spawnBenchWorkers({ databaseUrl: bdb.url, count: 1, slots: 64, env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0" } });
  try {
    const { userId, threadId } = await owner(database.db);
    const token = await createApiToken(database.db, { userId });
    const scope: Scope = { userId, threadId, token, database, web };
    for (;;) {
      const [row] = await database.db.execute<{ n: number }>(sql`select count(*)::int as n from worker_heartbeats where stopped_at is null`);
      if (row!.n >= 1) break;
      await sleep(100);
    }
    // Warm-up: module loading, JIT, prepared statements, the schema's and patterns' caches.
    await runBatch(scope, "plain", Math.min(500, ITEMS));
    await runBatch(scope, "typed", Math.min(500, ITEMS));
    const plain: number[] = [];
    const typed: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      plain.push(await runBatch(scope, "plain", ITEMS));
      typed.push(await runBatch(scope, "typed", ITEMS));
      log(`round ${round + 1}: plain ${plain.at(-1)!.toFixed(2)} s, typed + checked ${typed.at(-1)!.toFixed(2)} s`);
    }
    const t = median(typed);
    const p = median(plain);
    return [
      {
        metric: `data: ${ITEMS} items, 1 worker x 64 slots, simulator latency 0, HTTP in: typed + 2 checks s vs plain s (${(ITEMS / t).toFixed(0)} vs ${(ITEMS / p).toFixed(0)} items/s, ${(p / t).toFixed(2)}x)`,
        ours: t,
        baseline: p,
        ratio: t / p,
        target: 1.25,
      },
    ];
  } finally {
    agent.destroy();
    await stopBenchWorkers(workers);
    await web.stop();
    await database.close();
    await bdb.close();
    await server.stop();
  }
}
