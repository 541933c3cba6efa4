import { batchSubagent } from "@/server/agent/registry";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, } from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import postgres from "postgres";
import { configSchema } from "@/lib/config";
import { createApiToken } from "@/server/auth/tokens";
import { createUser } from "@/server/auth/users";
import { submitBatch } from "@/server/batches/submit";
import { createThread } from "@/server/chat/threads";
import { createDatabase } from "@/server/db/client";
import { startEmbeddedPostgres } from "@/server/db/embedded";
import { migrateDatabase } from "@/server/db/migrate";
import type { BenchRow } from "./types";

/**
 * results.jsonl export of 5,000 items with 100,000-character results (≈ 500 MB) through the
 * real route over real HTTP, against `psql -c "COPY (SELECT ...) TO STDOUT"` of the same rows
 * in the same run, plus the peak RSS growth of the web process during the export.
 *
 * The web process is scripts/web.ts as `npm start` runs it (bench/web.ts; needs `npx next build`),
 * port 3221. Rows (lower ratio is better, the harness's rule):
 *   - export wall time vs COPY wall time, target ≤ 2.0 (i.e. throughput ≥ 0.5 × COPY)
 *   - peak RSS growth of the web process tree (MB) vs the 64 MB budget, target ≤ 1.0: for the
 *     first big export after start (includes the heap growing to its working size) and the
 *     worst of the later ones
 *   - a deep items page (after position 4,900) vs the first page, target ≤ 1.5
 */

export const name = "export";

const PORT = 3221;

const ITEMS = Number(process.env.EXPORT_BENCH_ITEMS ?? 5_000);
const RESULT_CHARS = 100_000;
const ROUNDS = Number(process.env.EXPORT_BENCH_ROUNDS ?? 5);
const RSS_BUDGET_MB = 64;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (msg: string) => process.stderr.write(`  export: ${msg}\n`);

async function benchServer(): Promise<{ adminUrl: string; stop(): Promise<void> }> {
  if (process.env.DATABASE_URL) return { adminUrl: process.env.DATABASE_URL, stop: async () => {} };
  const tmp = mkdtempSync(path.join(os.tmpdir(), "flotilla-bench-export-pg-"));
  chmodSync(tmp, 0o755);
  const server = await startEmbeddedPostgres({ dataDir: path.join(tmp, "data"), port: 54990 + (process.pid % 9) });
  return {
    adminUrl: server.url(),
    stop: async () => {
      await server.stop();
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Web process

import { startWeb, type Web } from "./web";

export { startWeb, type Web };

/** Resident set size of a process and all its descendants, in bytes (Linux /proc). */
export function treeRss(rootPid: number): number {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // exited meanwhile
    }
  }
  let total = 0;
  const stack = [rootPid];
  while (stack.length) {
    const pid = stack.pop()!;
    try {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      if (m) total += Number(m[1]) * 1024;
    } catch {
      // exited meanwhile
    }
    stack.push(...(children.get(pid) ?? []));
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Measurements

/** GETs a URL, counting bytes and newlines; never keeps the body. */
export function download(url: string, token: string): Promise<{ ms: number; bytes: number; lines: number; status: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = http.get(url, { headers: { authorization: `Bearer ${token}` } }, (res) => {
      let bytes = 0;
      let lines = 0;
      res.on("data", (chunk: Buffer) => {
        bytes += chunk.byteLength;
        for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
      });
      res.on("end", () => resolve({ ms: performance.now() - started, bytes, lines, status: res.statusCode ?? 0 }));
      res.on("error", reject);
    });
    req.on("error", reject);
  });
}

export function psqlCopy(url: string, query: string, options = ""): Promise<{ ms: number; bytes: number; lines: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn("psql", [url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", `COPY (${query}) TO STDOUT ${options}`], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let bytes = 0;
    let lines = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      bytes += chunk.byteLength;
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
    });
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve({ ms: performance.now() - started, bytes, lines }) : reject(new Error(`psql exited ${code}`)),
    );
  });
}

export async function run(): Promise<BenchRow[]> {
  const server = await benchServer();
  const dbName = `flotilla_bench_export_${randomBytes(4).toString("hex")}`;
  const admin = postgres(server.adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${dbName}"`);
  const u = new URL(server.adminUrl);
  u.pathname = `/${dbName}`;
  const url = u.toString();
  await migrateDatabase(url);
  const database = createDatabase(url, { max: 2, applicationName: "flotilla-bench" });
  let web: Web | undefined;
  try {
    const config = configSchema.parse({});
    const user = await createUser(database.db, { email: "bench@example.test", password: "bench-password" });
    const token = await createApiToken(database.db, { userId: user.id });
    const thread = await createThread(database.db, { userId: user.id });
    const submit = async (key: string, count: number) =>
      (
        await submitBatch(database.db, { ...batchSubagent(config, undefined),
          userId: user.id,
          threadId: thread.id,
          input: { submission_key: key, items: Array.from({ length: count }, (_, i) => `item ${i + 1}`) },
          config,
        })
      ).batch.id;
    const batchId = await submit("bench-export", ITEMS);
    const warmId = await submit("bench-warm", 20);
    log(`seeding ${ITEMS} results of ${RESULT_CHARS} characters ...`);
    // Hex with a newline every 32 characters: barely compressible (stored near full size) and
    // every line needs escaping in both JSON and COPY text format, as real model output does.
    const seeded = performance.now();
    await database.sql`
      update subagent_batch_items
         set status = 'succeeded', attempts = 1, input_tokens = 1000, output_tokens = 25000,
             result = left((select string_agg(md5(position::text || ':' || g::text), E'\n')
                              from generate_series(1, 3100) g), ${RESULT_CHARS}),
             preview = 'preview', started_at = now(), finished_at = now()
       where batch_id in (${batchId}, ${warmId})`;
    await database.sql`vacuum analyze subagent_batch_items`;
    log(`seeded in ${((performance.now() - seeded) / 1000).toFixed(1)} s`);

    web = await startWeb(url, { port: PORT });
    log(`web: scripts/web.ts (pid ${web.pid})`);
    const exportUrl = (id: string) => `${web!.base}/api/threads/${thread.id}/subagent-batches/${id}/results.jsonl`;
    for (let i = 0; i < 3; i++) {
      const warm = await download(exportUrl(warmId), token);
      if (warm.status !== 200 || warm.lines !== 20) throw new Error(`warm-up export failed: ${JSON.stringify(warm)}`);
    }

    const query = `SELECT item_key, position, status, attempts, result, error, input_tokens, output_tokens FROM subagent_batch_items WHERE batch_id = '${batchId}' ORDER BY position`;
    const copyMs: number[] = [];
    const oursMs: number[] = [];
    const growthMb: number[] = [];
    let oursBytes = 0;
    let copyBytes = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const copy = await psqlCopy(url, query);
      if (copy.lines !== ITEMS) throw new Error(`COPY returned ${copy.lines} lines`);
      copyMs.push(copy.ms);
      copyBytes = copy.bytes;

      const before = treeRss(web.pid);
      let peak = before;
      const sampler = setInterval(() => {
        peak = Math.max(peak, treeRss(web!.pid));
      }, 5);
      const ours = await download(exportUrl(batchId), token);
      clearInterval(sampler);
      peak = Math.max(peak, treeRss(web.pid));
      if (ours.status !== 200 || ours.lines !== ITEMS) throw new Error(`export returned ${ours.status} with ${ours.lines} lines`);
      oursMs.push(ours.ms);
      oursBytes = ours.bytes;
      growthMb.push((peak - before) / (1024 * 1024));
      log(
        `round ${round + 1}: COPY ${copy.ms.toFixed(0)} ms (${(copy.bytes / 1e6).toFixed(0)} MB), export ${ours.ms.toFixed(0)} ms (${(ours.bytes / 1e6).toFixed(0)} MB), RSS ${(before / 1048576).toFixed(0)} → peak ${(peak / 1048576).toFixed(0)} MB`,
      );
    }

    // Items pages: the first vs one deep in the batch (keyset: same cost).
    const pageUrl = (q: string) => `${web!.base}/api/threads/${thread.id}/subagent-batches/${batchId}/items${q}`;
    const deepCursor = Buffer.from(`v1:${ITEMS - 100}`, "utf8").toString("base64url");
    const first: number[] = [];
    const deep: number[] = [];
    for (let i = 0; i < 120; i++) {
      const a = await download(pageUrl("?limit=50"), token);
      const b = await download(pageUrl(`?limit=50&cursor=${deepCursor}`), token);
      if (a.status !== 200 || b.status !== 200) throw new Error(`items page failed: ${a.status} ${b.status}`);
      if (i >= 20) {
        first.push(a.ms);
        deep.push(b.ms);
      }
    }

    const ours = median(oursMs);
    const copy = median(copyMs);
    const firstGrowth = growthMb[0]!;
    const laterGrowth = Math.max(...growthMb.slice(1));
    log(`bytes: export ${oursBytes}, COPY ${copyBytes}; throughput export ${(oursBytes / 1e6 / (ours / 1000)).toFixed(0)} MB/s, COPY ${(copyBytes / 1e6 / (copy / 1000)).toFixed(0)} MB/s`);
    return [
      {
        metric: `ms to export ${ITEMS} × ${RESULT_CHARS / 1000}k-char results over HTTP (scripts/web.ts, as npm start runs it) vs psql COPY TO STDOUT`,
        ours,
        baseline: copy,
        ratio: ours / copy,
        target: 2,
      },
      {
        metric: `peak RSS growth of the web process, first big export after start, MB (vs ${RSS_BUDGET_MB} MB budget)`,
        ours: firstGrowth,
        baseline: RSS_BUDGET_MB,
        ratio: firstGrowth / RSS_BUDGET_MB,
        target: 1,
      },
      {
        metric: `peak RSS growth of the web process, worst later export, MB (vs ${RSS_BUDGET_MB} MB budget)`,
        ours: laterGrowth,
        baseline: RSS_BUDGET_MB,
        ratio: laterGrowth / RSS_BUDGET_MB,
        target: 1,
      },
      {
        metric: `ms per items page after position ${ITEMS - 100} vs the first page (limit 50)`,
        ours: median(deep),
        baseline: median(first),
        ratio: median(deep) / median(first),
        target: 1.5,
      },
    ];
  } finally {
    await web?.stop();
    await database.close();
    await admin.unsafe(`drop database if exists "${dbName}" with (force)`);
    await admin.end({ timeout: 5 });
    await server.stop();
  }
}
