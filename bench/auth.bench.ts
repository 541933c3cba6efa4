import { batchSubagent } from "@/server/agent/registry";
import { randomBytes } from "node:crypto";
import { lookup } from "node:dns/promises";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { configSchema } from "@/lib/config";
import { authOptions } from "@/server/auth/options";
import { createUser } from "@/server/auth/users";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { createThread } from "@/server/chat/threads";
import { createDatabase, getDatabase } from "@/server/db/client";
import { migrateDatabase } from "@/server/db/migrate";
import type { BenchRow } from "./types";
import { spawnBenchWorkers, stopBenchWorkers } from "./workers";

/**
 * Many users on one deployment (issue 16), against DATABASE_URL (PostgreSQL 15 here):
 *
 * 1. Brute force: 200 sign-in attempts at once (wrong passwords spread over 10 emails, so the
 *    per-email lock refuses 10 of each email's 20) through next-auth's credentials `authorize` — the rate
 *    limiter in PostgreSQL, then scrypt under the hashing semaphore. Meanwhile /api/health's work
 *    (`select 1` on the web pool) and a dns.lookup run every 10 ms in the same process: their
 *    p95 must stay under 200 ms (scrypt may not take the thread pool DNS and the driver need).
 * 2. Fair share with real worker processes: a 12-item batch of user B (running limit 3) alone,
 *    then behind four 300-item batches of user A; B's time behind A must stay within 1.5× alone.
 */

export const name = "auth";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.95)] ?? Number.NaN;

async function freshDatabase(adminUrl: string) {
  const dbName = `flotilla_bench_auth_${randomBytes(5).toString("hex")}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${dbName}"`);
  const u = new URL(adminUrl);
  u.pathname = `/${dbName}`;
  await migrateDatabase(u.toString());
  return {
    url: u.toString(),
    drop: async () => {
      await admin.unsafe(`drop database if exists "${dbName}" with (force)`);
      await admin.end({ timeout: 5 });
    },
  };
}

type Authorize = (c: Record<string, string>, req: { headers: Record<string, string> }) => Promise<unknown>;

async function bruteForce(url: string): Promise<BenchRow[]> {
  process.env.DATABASE_URL = url;
  const db = getDatabase();
  const emails: string[] = [];
  for (let i = 0; i < 10; i++) emails.push((await createUser(db.db, { email: `victim-${i}@example.com`, password: "the right password" })).email);
  const authorize = (authOptions.providers[0] as unknown as { options: { authorize: Authorize } }).options.authorize;

  const probe = async (stopAt: () => boolean) => {
    const health: number[] = [];
    const dns: number[] = [];
    while (!stopAt()) {
      const t0 = performance.now();
      await db.db.execute(sql`select 1`);
      health.push(performance.now() - t0);
      const t1 = performance.now();
      await lookup("localhost");
      dns.push(performance.now() - t1);
      await sleep(10);
    }
    return { health, dns };
  };

  // Idle reference for the probes.
  const idleUntil = Date.now() + 1_000;
  const idle = await probe(() => Date.now() > idleUntil);

  let done = false;
  const probing = probe(() => done);
  const started = performance.now();
  const outcomes = await Promise.allSettled(
    Array.from({ length: 200 }, (_, i) =>
      authorize({ email: emails[i % 10]!, password: `guess ${i}` }, { headers: { "x-forwarded-for": `198.51.100.${i % 50}` } }),
    ),
  );
  const seconds = (performance.now() - started) / 1000;
  done = true;
  const busy = await probing;
  const locked = outcomes.filter((o) => o.status === "rejected").length;
  process.stderr.write(
    `  brute force: 200 attempts in ${seconds.toFixed(2)} s (${locked} refused by the lock, ${200 - locked} hashed); ` +
      `health p95 ${p95(busy.health).toFixed(1)} ms (idle ${p95(idle.health).toFixed(1)}), dns p95 ${p95(busy.dns).toFixed(1)} ms\n`,
  );
  await db.close();
  (globalThis as { __flotillaDb?: unknown }).__flotillaDb = undefined;
  return [
    { metric: `sign-in burst: attempts/s (200 at once, ${locked} locked out)`, ours: 200 / seconds, baseline: 200 / seconds, ratio: 1, target: 1 },
    { metric: "sign-in burst: /api/health query p95 ms vs the 200 ms budget", ours: p95(busy.health), baseline: 200, ratio: p95(busy.health) / 200, target: 1 },
    { metric: "sign-in burst: dns.lookup p95 ms vs the 200 ms budget", ours: p95(busy.dns), baseline: 200, ratio: p95(busy.dns) / 200, target: 1 },
  ];
}

async function fairShare(url: string): Promise<BenchRow[]> {
  const database = createDatabase(url, { max: 4 });
  const children = spawnBenchWorkers({ databaseUrl: url, count: 2, slots: 8, env: { FLOTILLA__SIMULATOR__LATENCY_MS: "10" } });
  try {
    for (;;) {
      const [row] = (await database.db.execute(sql`select count(*)::int as n from worker_heartbeats where stopped_at is null`)) as unknown as { n: number }[];
      if ((row?.n ?? 0) >= 2) break;
      await sleep(100);
    }
    const cfg = configSchema.parse({ subagent_batches: { max_running_items_per_batch: 64 } });
    const owner = async (label: string) => {
      const user = await createUser(database.db, { email: `${label}-${randomBytes(3).toString("hex")}@example.com`, password: "bench-password" });
      const thread = await createThread(database.db, { userId: user.id, title: label });
      return { userId: user.id, threadId: thread.id };
    };
    let key = 0;
    const submit = async (o: { userId: string; threadId: string }, n: number, maxRunning: number) =>
      (
        await submitBatch(database.db, { ...batchSubagent(cfg, undefined),
          ...o,
          input: { submission_key: `fs-${++key}`, prompt_template: "{{item}} [[sleep:250]]", items: Array.from({ length: n }, (_, i) => String(i)), max_running_items: maxRunning },
          config: cfg,
          model: { name: "simulator", simulator: true },
        })
      ).batch;
    const finished = async (o: { userId: string; threadId: string }, batchId: string) => {
      for (;;) {
        const b = await getBatch(database.db, { ...o, batchId });
        if (b.status === "completed") return ((b.finishedAt as Date).getTime() - b.createdAt.getTime()) / 1000;
        await sleep(20);
      }
    };
    const b = await owner("user-b");
    const warm = await submit(b, 16, 16);
    await finished(b, warm.id);
    const alone = await finished(b, (await submit(b, 12, 3)).id);
    const a = await owner("user-a");
    const big = [];
    for (let i = 0; i < 4; i++) big.push(await submit(a, 300, 16));
    await sleep(1_000); // A's batches fill every slot first
    const behind = await finished(b, (await submit(b, 12, 3)).id);
    process.stderr.write(`  fair share: B alone ${alone.toFixed(2)} s, behind A's four batches ${behind.toFixed(2)} s\n`);
    for (const x of big) await database.db.execute(sql`update subagent_batches set status = 'cancelled' where id = ${x.id}`);
    return [{ metric: "fair share: B's 12-item batch behind 4x300 of A, s vs alone (2 workers x 8 slots)", ours: behind, baseline: alone, ratio: behind / alone, target: 1.5 }];
  } finally {
    await stopBenchWorkers(children);
    await database.close();
  }
}

export async function run(): Promise<BenchRow[]> {
  const adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) throw new Error("auth bench: set DATABASE_URL to a PostgreSQL server it may create databases on");
  const first = await freshDatabase(adminUrl);
  const second = await freshDatabase(adminUrl);
  try {
    return [...(await bruteForce(first.url)), ...(await fairShare(second.url))];
  } finally {
    process.env.DATABASE_URL = adminUrl;
    await first.drop();
    await second.drop();
  }
}
