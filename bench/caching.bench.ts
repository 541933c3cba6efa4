import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { configSchema } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { createUser } from "@/server/auth/users";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { createThread } from "@/server/chat/threads";
import { createDatabase } from "@/server/db/client";
import { startEmbeddedPostgres } from "@/server/db/embedded";
import { migrateDatabase } from "@/server/db/migrate";
import { costUsd } from "@/server/models/catalog";
import { startFakeAnthropic } from "../test/helpers/fake-anthropic";
import type { BenchRow } from "./types";
import { spawnBenchWorkers, stopBenchWorkers } from "./workers";

/**
 * What prompt caching saves: 1,000 items sharing a ~3,700-token context (the template's text
 * before its placeholder) on an `anthropic` entry, run by a real worker process against the fake
 * Anthropic server (test/helpers/fake-anthropic.ts), which bills cache writes and reads as
 * Anthropic does. "ours" is the batch's cost_usd with caching (reads at 0.1x the input price,
 * writes at 1.25x); the baseline is the naive live cost of the same batch, computed from the same
 * usage as if nothing were cached (every input token at the input price). Target: <= 0.3x.
 * CACHING_BENCH_ITEMS changes the size.
 */

export const name = "caching";

const ITEMS = Number(process.env.CACHING_BENCH_ITEMS ?? 1_000);
const PRICES = {
  price_per_million_input: 3,
  price_per_million_output: 15,
  price_per_million_cached_input: 0.3,
  price_per_million_cache_write: 3.75,
};
// ~14,800 characters: ~3,700 tokens at the fakes' 4 characters a token.
const CONTEXT = `Reference manual for the support desk.\n${"Section: a customer who reports a fault gets a ticket number, a reply within one working day, and a named engineer. ".repeat(127)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function server(): Promise<{ adminUrl: string; stop(): Promise<void> }> {
  if (process.env.DATABASE_URL) return { adminUrl: process.env.DATABASE_URL, stop: async () => {} };
  const tmp = mkdtempSync(path.join(os.tmpdir(), "flotilla-bench-caching-"));
  chmodSync(tmp, 0o755);
  const pg = await startEmbeddedPostgres({ dataDir: path.join(tmp, "data"), port: 54467 });
  return {
    adminUrl: pg.url(),
    stop: async () => {
      await pg.stop();
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

export async function run(): Promise<BenchRow[]> {
  const srv = await server();
  const fake = await startFakeAnthropic({ handler: () => ({ type: "text", text: "Ticket, one day, an engineer.", chunkDelayMs: 0 }) });
  const dbName = `flotilla_bench_caching_${randomBytes(5).toString("hex")}`;
  const admin = postgres(srv.adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${dbName}"`);
  const u = new URL(srv.adminUrl);
  u.pathname = `/${dbName}`;
  const url = u.toString();
  await migrateDatabase(url);
  const models = [{ name: "claude", provider: "anthropic" as const, base_url: fake.url, api_key_env: "BENCH_ANTHROPIC_KEY", model: "claude-sonnet-4-5", ...PRICES }];
  const database = createDatabase(url, { max: 4 });
  const children = spawnBenchWorkers({
    databaseUrl: url,
    count: 1,
    slots: 32,
    env: { FLOTILLA__MODELS: JSON.stringify(models), BENCH_ANTHROPIC_KEY: "bench" },
  });
  try {
    const user = await createUser(database.db, { email: `bench-${randomBytes(4).toString("hex")}@example.com`, password: "bench-password" });
    const thread = await createThread(database.db, { userId: user.id, title: "bench" });
    const scope = { userId: user.id, threadId: thread.id };
    for (;;) {
      const [row] = (await database.db.execute(
        sql`select count(*)::int as n from worker_heartbeats where stopped_at is null`,
      )) as unknown as { n: number }[];
      if ((row?.n ?? 0) >= 1) break;
      await sleep(100);
    }
    const cfg = configSchema.parse({ models, subagent_batches: { max_running_items_per_batch: 64 } });
    const { batch } = await submitBatch(database.db, {
      ...batchSubagent(cfg, undefined),
      ...scope,
      input: {
        submission_key: "caching",
        prompt_template: `${CONTEXT}\n\nCustomer question {{item}}: what happens next?`,
        items: Array.from({ length: ITEMS }, (_, i) => String(i + 1)),
        max_running_items: 32,
        max_live_items: ITEMS,
      },
      config: cfg,
      model: { name: "claude-sonnet-4-5", simulator: false, catalogName: "claude" },
    });
    const deadline = Date.now() + 600_000;
    let done = await getBatch(database.db, { ...scope, batchId: batch.id });
    while (done.status !== "completed" && done.status !== "failed" && done.status !== "cancelled") {
      if (Date.now() > deadline) throw new Error("caching bench: batch did not finish");
      await sleep(200);
      done = await getBatch(database.db, { ...scope, batchId: batch.id });
    }
    if (done.succeededCount !== ITEMS) throw new Error(`caching bench: ${done.succeededCount}/${ITEMS} succeeded`);
    const input = Number(done.inputTokens);
    const output = Number(done.outputTokens);
    const naive = costUsd(
      { pricePerMillionInput: 3, pricePerMillionOutput: 15, pricePerMillionCachedInput: 3, pricePerMillionCacheWrite: 3 },
      { inputTokens: input, outputTokens: output },
    );
    const ours = Number(done.costUsd);
    process.stderr.write(
      `  caching: ${ITEMS} items, ${input} input tokens (${Number(done.cachedInputTokens)} read, ${Number(done.cacheWriteTokens)} written), $${ours.toFixed(4)} cached vs $${naive.toFixed(4)} naive\n`,
    );
    return [{ metric: `${ITEMS} items sharing a ~3,700-token context, fake Anthropic: cost with caching (USD)`, ours, baseline: naive, ratio: ours / naive, target: 0.3 }];
  } finally {
    await stopBenchWorkers(children);
    await database.close();
    await admin.unsafe(`drop database if exists "${dbName}" with (force)`);
    await admin.end({ timeout: 5 });
    await fake.close();
    await srv.stop();
  }
}
