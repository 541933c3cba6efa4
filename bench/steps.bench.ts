import { sql } from "drizzle-orm";
import { configSchema } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { submitBatch } from "@/server/batches/submit";
import { createDatabase } from "@/server/db/client";
import { log } from "@/server/log";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { subagentItemExecutor } from "@/server/worker/execute";
import { BatchWorker } from "@/server/worker/loop";
import { benchServer, freshDatabase, owner, waitTerminal } from "./batch.bench";
import type { BenchRow } from "./types";

/**
 * Durable steps (issue 26): what storing a batch item's steps costs. Every item is three model
 * steps — two tool steps (`count_text`, then `current_time`, both in-process tools) and the
 * answer — on the simulator at latency 0, run by an in-process worker with 64 slots and the
 * production executor: with durable steps (two step rows written under the lease per item, and
 * dropped at the settle) vs the same executor with `durableSteps: false`, in the same run and
 * database, alternating (without, with, ...) after a warm-up of each. Time: the worker's start
 * to its last settlement. Target <= 1.2. STEPS_BENCH_ITEMS (default 1,000) and STEPS_BENCH_ROUNDS
 * (default 3) size it.
 */

export const name = "steps";

const ITEMS = Number(process.env.STEPS_BENCH_ITEMS ?? 1_000);
const ROUNDS = Number(process.env.STEPS_BENCH_ROUNDS ?? 3);
const SLOTS = 64;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const note = (msg: string) => process.stderr.write(`  steps: ${msg}\n`);

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const bdb = await freshDatabase(server.adminUrl);
  const database = createDatabase(bdb.url, { max: 8 });
  const config = configSchema.parse({
    simulator: { latency_ms: 0 },
    subagent_runtime: { max_running: SLOTS },
    subagent_batches: { max_live_items_per_batch: 10_000, poll_interval_seconds: 0.05 },
    subagents: {
      definitions: [
        { name: "stepper", description: "Counts, reads the clock, answers.", system_prompt: "Use the tools.", tool_groups: ["text", "clock"] },
      ],
    },
  });
  const quiet = log.child({}, { level: "warn" });
  let submissions = 0;
  try {
    const scope = await owner(database.db);
    const stepRows = async () => {
      const [row] = await database.db.execute<{ n: number }>(sql`select count(*)::int as n from subagent_batch_item_steps`);
      return row!.n;
    };
    const batch = async (durableSteps: boolean, n: number): Promise<number> => {
      const { batch: b } = await submitBatch(database.db, {
        ...batchSubagent(config, "stepper"),
        ...scope,
        input: {
          submission_key: `steps-${++submissions}`,
          subagent: "stepper",
          items: Array.from({ length: n }, (_, i) => `Item ${i} [[tool:count_text {"text":"item ${i}"}]] [[tool:current_time]]`),
          max_running_items: SLOTS,
          max_live_items: Math.min(n, 10_000),
        },
        config,
        model: { name: "simulator", simulator: true },
      });
      const runtime = createSubagentRuntime(config);
      const worker = new BatchWorker({
        database,
        config,
        instanceId: `bench-steps-${submissions}`,
        runtime,
        executor: subagentItemExecutor({ db: database.db, runtime, durableSteps }),
        listen: false,
        heartbeat: false,
        logger: quiet,
      });
      const t0 = performance.now();
      await worker.start();
      // Step rows seen while it runs (a look every 100 ms): some with durable steps, none without.
      let seen = 0;
      let looked = t0;
      while (worker.counters.settled < n) {
        await sleep(5);
        if (performance.now() - looked > 100) {
          seen = Math.max(seen, await stepRows());
          looked = performance.now();
        }
      }
      const elapsed = (performance.now() - t0) / 1000;
      await worker.stop();
      const done = await waitTerminal(database.db, { ...scope, batchId: b.id }, 60_000);
      if (done.succeededCount !== n) throw new Error(`steps bench: ${done.succeededCount}/${n} succeeded (${done.status})`);
      // Each arm did what it claims: three steps per item, two of them stored only with durable steps.
      const [row] = await database.db.execute<{ answered: number; left: number }>(sql`
        select count(*) filter (where result like 'Ran 2 tool calls%')::int as answered,
               (select count(*)::int from subagent_batch_item_steps s join subagent_batch_items i on i.id = s.item_id
                 where i.batch_id = ${b.id}) as left
          from subagent_batch_items where batch_id = ${b.id}`);
      if (row!.answered !== n) throw new Error(`steps bench: only ${row!.answered} of ${n} items ran both tools`);
      if (row!.left !== 0) throw new Error(`steps bench: ${row!.left} step rows left after the batch finished`);
      if (durableSteps && seen === 0 && elapsed > 0.5) throw new Error("steps bench: no step row was seen with durable steps");
      if (!durableSteps && seen > 0) throw new Error(`steps bench: the baseline stored ${seen} step rows`);
      return elapsed;
    };

    await batch(false, Math.min(200, ITEMS)); // warm-up: JIT, prepared statements, schema caches
    await batch(true, Math.min(200, ITEMS));
    const without: number[] = [];
    const withSteps: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      without.push(await batch(false, ITEMS));
      withSteps.push(await batch(true, ITEMS));
      note(`round ${r + 1}: without ${without.at(-1)!.toFixed(2)} s, with durable steps ${withSteps.at(-1)!.toFixed(2)} s`);
    }
    const ours = median(withSteps);
    const baseline = median(without);
    return [
      {
        metric: `durable steps: ${ITEMS} items x 3 steps (2 tool steps + answer), 1 in-process worker x ${SLOTS} slots, simulator latency 0: wall s with vs without step storage (${(ITEMS / ours).toFixed(0)} vs ${(ITEMS / baseline).toFixed(0)} items/s)`,
        ours,
        baseline,
        ratio: ours / baseline,
        target: 1.2,
      },
    ];
  } finally {
    await database.close();
    await bdb.close();
    await server.stop();
  }
}
