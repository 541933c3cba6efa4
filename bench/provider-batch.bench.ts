import { configSchema } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { submitBatch } from "@/server/batches/submit";
import { createDatabase } from "@/server/db/client";
import { costUsd } from "@/server/models/catalog";
import { startFakeAnthropic } from "../test/helpers/fake-anthropic";
import { addAnthropicBatches } from "../test/helpers/fake-provider-batches";
import { benchServer, freshDatabase, owner, waitTerminal } from "./batch.bench";
import type { BenchRow } from "./types";
import { processTreeCpuMs, spawnBenchWorkers, stopBenchWorkers, waitForWorkers } from "./workers";

/**
 * The providers' batch lane (server/worker/provider-lane/): one batch of 10,000 items on
 * `lane: "provider_batch"`, sent by a real worker process (server/worker/main.ts) to the fake
 * Anthropic Message Batches API (test/helpers/fake-provider-batches.ts), which runs in this
 * process and ends the provider batch at its first poll. Two rows:
 *   - the worker's CPU (user + system of its process tree, /proc/PID/stat) from submission to the
 *     batch's end, per item: building each request, sending, polling, reading and settling each
 *     result; target <= 1 ms an item. The fake's own work is in this process and not counted.
 *   - the batch's cost_usd against the same usage priced live (its tokens x the entry's prices):
 *     exactly the batch discount, 0.5 (within 1e-9).
 * PROVIDER_BATCH_BENCH_ITEMS changes the size.
 */

export const name = "provider-batch";

const ITEMS = Number(process.env.PROVIDER_BATCH_BENCH_ITEMS ?? 10_000);
const WORKERS = 1;
const CPU_TARGET_MS = 1;
const DISCOUNT = 0.5;
const PRICES = { price_per_million_input: 3, price_per_million_output: 15, price_per_million_cached_input: 0.3, price_per_million_cache_write: 3.75 };
const MODELS = [{ name: "claude", provider: "anthropic" as const, model: "claude-sonnet-4-5", api_key_env: "BENCH_ANTHROPIC_KEY", ...PRICES }];
const LABELER = { name: "labeler", description: "Labels a support ticket.", system_prompt: "You label support tickets. Answer with one word.", tool_groups: [] };

export async function run(): Promise<BenchRow[]> {
  const srv = await benchServer();
  const fake = await startFakeAnthropic({ handler: () => ({ type: "text", text: "hardware", chunkDelayMs: 0 }) });
  addAnthropicBatches(fake, { finishAfterPolls: 0 });
  const db = await freshDatabase(srv.adminUrl);
  const database = createDatabase(db.url, { max: 2 });
  const models = MODELS.map((m) => ({ ...m, base_url: fake.url }));
  const workers = spawnBenchWorkers({
    databaseUrl: db.url,
    count: WORKERS,
    slots: 4,
    env: {
      FLOTILLA__MODELS: JSON.stringify(models),
      BENCH_ANTHROPIC_KEY: "bench",
      // Results come back at the first poll; poll it soon.
      FLOTILLA__PROVIDER_BATCH__POLL_SECONDS: "0.1",
    },
  });
  try {
    // Started (modules loaded) before the CPU count begins.
    await waitForWorkers(database.sql, WORKERS);
    const cpu = () => workers.reduce((sum, w) => sum + processTreeCpuMs(w.pid!), 0);
    const cfg = configSchema.parse({ models, subagents: { definitions: [LABELER] }, subagent_batches: { max_items_per_batch: ITEMS } });
    const scope = await owner(database.db);
    const cpuBefore = cpu();
    const startedAt = performance.now();
    const { batch } = await submitBatch(database.db, {
      ...batchSubagent(cfg, LABELER.name),
      ...scope,
      input: {
        submission_key: "provider-batch",
        subagent: LABELER.name,
        prompt_template: "Label this support ticket: {{item}}",
        items: Array.from({ length: ITEMS }, (_, i) => `ticket ${i + 1}: the printer on floor ${(i % 12) + 1} is jammed`),
        lane: "provider_batch",
      },
      config: cfg,
      model: { name: "claude", simulator: false, catalogName: "claude" },
    });
    const done = await waitTerminal(database.db, { ...scope, batchId: batch.id }, 30 * 60_000);
    const cpuMs = cpu() - cpuBefore;
    const wallS = (performance.now() - startedAt) / 1000;
    if (done.status !== "completed" || done.succeededCount !== ITEMS) throw new Error(`provider-batch bench: ${done.succeededCount}/${ITEMS} succeeded (${done.status})`);
    const usage = {
      inputTokens: Number(done.inputTokens),
      outputTokens: Number(done.outputTokens),
      cachedInputTokens: Number(done.cachedInputTokens),
      cacheWriteTokens: Number(done.cacheWriteTokens),
    };
    const live = costUsd(
      {
        pricePerMillionInput: PRICES.price_per_million_input,
        pricePerMillionOutput: PRICES.price_per_million_output,
        pricePerMillionCachedInput: PRICES.price_per_million_cached_input,
        pricePerMillionCacheWrite: PRICES.price_per_million_cache_write,
      },
      usage,
    );
    const ours = Number(done.costUsd);
    const perItem = cpuMs / ITEMS;
    process.stderr.write(
      `  provider-batch: ${ITEMS} items in ${wallS.toFixed(1)} s, worker CPU ${cpuMs.toFixed(0)} ms (${perItem.toFixed(3)} ms an item); ` +
        `${usage.inputTokens} input + ${usage.outputTokens} output tokens: $${ours} on the lane vs $${live} live (ratio ${(ours / live).toPrecision(15)})\n`,
    );
    const what = `${ITEMS} items, lane provider_batch, ${WORKERS} worker (server/worker/main.ts), fake Anthropic Message Batches`;
    return [
      {
        metric: `${what}: worker CPU (user+system of its process tree, /proc) per item, submission to end, ms vs ${CPU_TARGET_MS} ms`,
        ours: perItem,
        baseline: CPU_TARGET_MS,
        ratio: perItem / CPU_TARGET_MS,
        target: 1,
      },
      {
        metric: `${what}: the batch's cost_usd vs the same tokens at the live prices (exactly the ${DISCOUNT} discount)`,
        ours,
        baseline: live,
        ratio: ours / live,
        target: DISCOUNT,
        tolerance: 1e-9,
      },
    ];
  } finally {
    await stopBenchWorkers(workers);
    await database.close();
    await db.close();
    await fake.close();
    await srv.stop();
  }
}
