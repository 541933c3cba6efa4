
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI, { toFile } from "openai";
import postgres from "postgres";
import { createApiToken } from "@/server/auth/tokens";
import { createUser } from "@/server/auth/users";
import { createDatabase } from "@/server/db/client";
import { startEmbeddedPostgres } from "@/server/db/embedded";
import { migrateDatabase } from "@/server/db/migrate";
import type { BenchRow } from "./types";
import { startWeb } from "./web";
import { spawnBenchWorkers, stopBenchWorkers } from "./workers";

/**
 * The OpenAI-compatible batch API end to end: a 50,000-line JSONL file uploaded with the official
 * `openai` SDK over real HTTP to scripts/web.ts as `npm start` runs it (bench/web.ts; needs
 * `npx next build`), a batch created from it (every line validated, then 50,000 durable items), and run
 * to `completed` by two worker processes with the simulator at latency 0. Rows:
 *   - upload → completed wall time (s) against a 300 s budget
 *   - the web process's peak RSS (VmHWM, MB) against a 256 MB budget: the ~10 MB upload and the
 *     validation stream through; nothing holds the whole file
 * COMPAT_BENCH_LINES changes the size.
 */

export const name = "compat";

const PORT = 3225;
const LINES = Number(process.env.COMPAT_BENCH_LINES ?? 50_000);
const TIME_BUDGET_S = 300;
const RSS_BUDGET_MB = 256;
const log = (msg: string) => process.stderr.write(`  compat: ${msg}\n`);

async function database(): Promise<{ url: string; stop(): Promise<void> }> {
  let adminUrl = process.env.DATABASE_URL;
  let stopServer = async () => {};
  if (!adminUrl) {
    const tmp = mkdtempSync(path.join(os.tmpdir(), "flotilla-bench-compat-pg-"));
    chmodSync(tmp, 0o755);
    const server = await startEmbeddedPostgres({ dataDir: path.join(tmp, "data"), port: 54980 + (process.pid % 9) });
    adminUrl = server.url();
    stopServer = async () => {
      await server.stop();
      rmSync(tmp, { recursive: true, force: true });
    };
  }
  const dbName = `flotilla_bench_compat_${randomBytes(4).toString("hex")}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${dbName}"`);
  const u = new URL(adminUrl);
  u.pathname = `/${dbName}`;
  await migrateDatabase(u.toString());
  return {
    url: u.toString(),
    stop: async () => {
      await admin.unsafe(`drop database if exists "${dbName}" with (force)`);
      await admin.end({ timeout: 5 });
      await stopServer();
    },
  };
}

function peakRssMb(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

export async function run(): Promise<BenchRow[]> {
  const db = await database();
  const { db: orm, close } = createDatabase(db.url, { max: 2 });
  const user = await createUser(orm, { email: `bench-${randomBytes(4).toString("hex")}@example.com`, password: "bench password 1" });
  const token = await createApiToken(orm, { userId: user.id });
  await close();

  const web = await startWeb(db.url, { port: PORT });
  const origin = web.base;
  const workers = spawnBenchWorkers({
    databaseUrl: db.url,
    count: 2,
    slots: 32,
    env: { FLOTILLA__SIMULATOR__LATENCY_MS: "0", FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.2" },
  });
  try {
    const lines: string[] = [];
    for (let i = 0; i < LINES; i++)
      lines.push(
        JSON.stringify({
          custom_id: `request-${i}`,
          method: "POST",
          url: "/v1/chat/completions",
          body: { model: "simulator", messages: [{ role: "user", content: `Summarize item ${i} of the bench file.` }], max_tokens: 64 },
        }),
      );
    const input = Buffer.from(`${lines.join("\n")}\n`);
    lines.length = 0;
    const client = new OpenAI({ baseURL: `${origin}/v1`, apiKey: token, maxRetries: 0, timeout: 600_000 });

    const t0 = performance.now();
    const file = await client.files.create({ file: await toFile(input, "bench.jsonl"), purpose: "batch" });
    const tUpload = performance.now();
    const rssAfterUpload = peakRssMb(web.pid);
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const tCreate = performance.now();
    let current = batch;
    while (current.status === "in_progress") {
      await new Promise((r) => setTimeout(r, 500));
      current = await client.batches.retrieve(batch.id);
    }
    const tDone = performance.now();
    if (current.status !== "completed" || current.request_counts?.completed !== LINES)
      throw new Error(`batch ended ${current.status} with ${JSON.stringify(current.request_counts)}`);
    const output = await client.files.content(current.output_file_id!);
    let outBytes = 0;
    for await (const chunk of output.body as unknown as AsyncIterable<Uint8Array>) outBytes += chunk.byteLength;
    const tOutput = performance.now();
    const peak = peakRssMb(web.pid);
    const s = (ms: number) => ms / 1000;
    log(
      `${LINES} lines (${(input.length / 1e6).toFixed(1)} MB): upload ${s(tUpload - t0).toFixed(2)} s, create ${s(tCreate - tUpload).toFixed(2)} s, ` +
        `run ${s(tDone - tCreate).toFixed(1)} s, output download ${s(tOutput - tDone).toFixed(2)} s (${(outBytes / 1e6).toFixed(1)} MB); ` +
        `web peak RSS ${rssAfterUpload.toFixed(0)} MB after upload, ${peak.toFixed(0)} MB overall`,
    );
    const total = s(tDone - t0);
    return [
      { metric: `${LINES}-line batch upload→completed (s)`, ours: total, baseline: TIME_BUDGET_S, ratio: total / TIME_BUDGET_S, target: 1 },
      { metric: "web peak RSS (MB)", ours: peak, baseline: RSS_BUDGET_MB, ratio: peak / RSS_BUDGET_MB, target: 1 },
    ];
  } finally {
    await stopBenchWorkers(workers);
    await web.stop();
    await db.stop();
  }
}
