import { batchSubagent } from "@/server/agent/registry";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { configSchema } from "@/lib/config";
import { createUser } from "@/server/auth/users";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { createThread } from "@/server/chat/threads";
import { createDatabase } from "@/server/db/client";
import { startEmbeddedPostgres } from "@/server/db/embedded";
import { migrateDatabase } from "@/server/db/migrate";
import type { BenchRow } from "./types";
import { spawnBenchWorkers, stopBenchWorkers } from "./workers";

/**
 * Overhead of the shared (PostgreSQL) rate limiter per model call, on the scheduler-efficiency
 * run: 2,000 items of 200 ms simulated latency, max_running_items 64, four worker processes with
 * 16 slots each. "ours" runs every model call through the limiter with a budget set so high it
 * never makes anyone wait (1,000,000 requests/min and 100,000,000 tokens/min: the reservation
 * UPDATE before and the token correction UPDATE after every call, on one hot row shared by all
 * four processes); the baseline is the same run with both budgets 0 (limiter off). Runs
 * alternate off/on so machine noise hits both; medians are reported.
 */

export const name = "ratelimit";

const ITEMS = 2_000;
const WORKERS = 4;
const SLOTS = 16;
const ROUNDS = Number(process.env.RATELIMIT_BENCH_ROUNDS ?? 3);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

async function server(): Promise<{ adminUrl: string; stop(): Promise<void> }> {
  if (process.env.DATABASE_URL) return { adminUrl: process.env.DATABASE_URL, stop: async () => {} };
  const tmp = mkdtempSync(path.join(os.tmpdir(), "flotilla-bench-rl-"));
  chmodSync(tmp, 0o755);
  const pg = await startEmbeddedPostgres({ dataDir: path.join(tmp, "data"), port: 54456 });
  return {
    adminUrl: pg.url(),
    stop: async () => {
      await pg.stop();
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

let submissions = 0;

/** One round in a fresh database: start the workers, warm them up, time a 2,000-item batch. */
async function round(adminUrl: string, limiter: boolean): Promise<{ seconds: number; requests: number }> {
  const dbName = `flotilla_bench_rl_${randomBytes(5).toString("hex")}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${dbName}"`);
  const u = new URL(adminUrl);
  u.pathname = `/${dbName}`;
  const url = u.toString();
  await migrateDatabase(url);
  const database = createDatabase(url, { max: 4 });
  const children = spawnBenchWorkers({
    databaseUrl: url,
    count: WORKERS,
    slots: SLOTS,
    env: {
      FLOTILLA__RATE_LIMITS__REQUESTS_PER_MINUTE: limiter ? "1000000" : "0",
      FLOTILLA__RATE_LIMITS__TOKENS_PER_MINUTE: limiter ? "100000000" : "0",
    },
  });
  try {
    const user = await createUser(database.db, { email: `bench-${randomBytes(4).toString("hex")}@example.com`, password: "bench-password" });
    const thread = await createThread(database.db, { userId: user.id, title: "bench" });
    const scope = { userId: user.id, threadId: thread.id };
    for (;;) {
      const [row] = (await database.db.execute(
        sql`select count(*)::int as n from worker_heartbeats where stopped_at is null`,
      )) as unknown as { n: number }[];
      if ((row?.n ?? 0) >= WORKERS) break;
      await sleep(100);
    }
    const cfg = configSchema.parse({ subagent_batches: { max_running_items_per_batch: 64 } });
    const run = async (n: number) => {
      const { batch } = await submitBatch(database.db, { ...batchSubagent(cfg, undefined),
        ...scope,
        input: {
          submission_key: `rl-${++submissions}`,
          prompt_template: "Item {{item}} [[sleep:200]]",
          items: Array.from({ length: n }, (_, i) => String(i)),
          max_running_items: 64,
          max_live_items: 1_000,
        },
        config: cfg,
        model: { name: "simulator", simulator: true },
      });
      const deadline = Date.now() + 180_000;
      for (;;) {
        const b = await getBatch(database.db, { ...scope, batchId: batch.id });
        if (b.status === "completed" || b.status === "failed" || b.status === "cancelled") {
          if (b.succeededCount !== n) throw new Error(`ratelimit bench: ${b.succeededCount}/${n} succeeded`);
          return ((b.finishedAt as Date).getTime() - b.createdAt.getTime()) / 1000;
        }
        if (Date.now() > deadline) throw new Error("ratelimit bench: batch did not finish");
        await sleep(20);
      }
    };
    await run(256); // warm-up: module loading and JIT in the workers
    const seconds = await run(ITEMS);
    const [row] = (await database.db.execute(
      sql`select coalesce(sum(requests), 0)::int as n from model_rate_limits`,
    )) as unknown as { n: number }[];
    return { seconds, requests: row?.n ?? 0 };
  } finally {
    await stopBenchWorkers(children);
    await database.close();
    await admin.unsafe(`drop database if exists "${dbName}" with (force)`);
    await admin.end({ timeout: 5 });
  }
}

export async function run(): Promise<BenchRow[]> {
  const srv = await server();
  try {
    const off: number[] = [];
    const on: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      off.push((await round(srv.adminUrl, false)).seconds);
      const r = await round(srv.adminUrl, true);
      // Every call really went through the shared row (warm-up + measured batch).
      if (r.requests < ITEMS + 256) throw new Error(`ratelimit bench: only ${r.requests} reservations recorded`);
      on.push(r.seconds);
      process.stderr.write(`  round ${i + 1}: off ${off[i]?.toFixed(2)} s, on ${on[i]?.toFixed(2)} s\n`);
    }
    const a = median(on);
    const b = median(off);
    return [
      {
        metric: `scheduler run (2000 items x 200 ms, ${WORKERS} workers x ${SLOTS} slots): wall s with the shared limiter vs off (${(((a - b) * 1000) / ITEMS).toFixed(2)} ms wall per item)`,
        ours: a,
        baseline: b,
        ratio: a / b,
        target: 1.1,
      },
    ];
  } finally {
    await srv.stop();
  }
}
