import { batchSubagent } from "@/server/agent/registry";
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
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
 * The web process is `next start` on a private copy of the current production build (so a
 * concurrent rebuild cannot pull it away) when one exists that contains the route; otherwise
 * (or with EXPORT_BENCH_SERVER=handler) a bare Node HTTP server around the same route handler
 * (bench/export-server.ts). EXPORT_BENCH_APP_DIR names an app directory with its own build
 * instead (e.g. a `git archive` of HEAD built apart from the shared tree). Ports 3221/3222. Rows (lower ratio is better, the harness's rule):
 *   - export wall time vs COPY wall time, target ≤ 2.0 (i.e. throughput ≥ 0.5 × COPY)
 *   - peak RSS growth of the web process tree (MB) vs the 64 MB budget, target ≤ 1.0: for the
 *     first big export after start (includes the heap growing to its working size) and the
 *     worst of the later ones
 *   - a deep items page (after position 4,900) vs the first page, target ≤ 1.5
 */

export const name = "export";

const ITEMS = Number(process.env.EXPORT_BENCH_ITEMS ?? 5_000);
const RESULT_CHARS = 100_000;
const ROUNDS = Number(process.env.EXPORT_BENCH_ROUNDS ?? 5);
const RSS_BUDGET_MB = 64;
const root = path.resolve(__dirname, "..");

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

export interface Web {
  kind: "next start" | "route handler in node:http";
  pid: number;
  base: string;
  stop(): Promise<void>;
}

/** A private copy of the production build, or undefined when none has the export route. */
function snapshotBuild(): string | undefined {
  const build = path.join(root, ".next");
  const route = path.join(build, "server/app/api/threads/[threadId]/subagent-batches/[batchId]/results.jsonl/route.js");
  if (!existsSync(path.join(build, "BUILD_ID")) || !existsSync(route)) return undefined;
  const id = readFileSync(path.join(build, "BUILD_ID"), "utf8");
  const dir = mkdtempSync(path.join(os.tmpdir(), "flotilla-bench-next-"));
  try {
    cpSync(build, path.join(dir, ".next"), { recursive: true, filter: (src) => !src.startsWith(path.join(build, "cache")) });
  } catch {
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
  // A rebuild that started during the copy leaves a mixed snapshot: do not use it.
  if (!existsSync(path.join(build, "BUILD_ID")) || readFileSync(path.join(build, "BUILD_ID"), "utf8") !== id) {
    rmSync(dir, { recursive: true, force: true });
    return undefined;
  }
  for (const f of ["package.json", "next.config.ts", "tsconfig.json"]) cpSync(path.join(root, f), path.join(dir, f));
  if (existsSync(path.join(root, "public"))) cpSync(path.join(root, "public"), path.join(dir, "public"), { recursive: true });
  symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"));
  return dir;
}

async function waitForLine(child: ChildProcess, pattern: RegExp, ms = 60_000): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`web process did not start within ${ms} ms`)), ms);
    let seen = "";
    const onData = (d: Buffer) => {
      seen += d.toString();
      if (pattern.test(seen)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", (d: Buffer) => process.stderr.write(d));
    child.once("exit", (code) => reject(new Error(`web process exited (${code}): ${seen.slice(-2000)}`)));
  });
}

/** The web process; `opts.mode` overrides EXPORT_BENCH_SERVER, `opts.env` adds to its environment. */
export async function startWeb(
  databaseUrl: string,
  opts: { mode?: "next" | "handler"; env?: Record<string, string>; port?: number } = {},
): Promise<Web> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: databaseUrl,
    NODE_ENV: "production",
    NEXTAUTH_SECRET: randomBytes(16).toString("hex"),
    ...opts.env,
  };
  const mode = opts.mode ?? process.env.EXPORT_BENCH_SERVER;
  // EXPORT_BENCH_APP_DIR: an app directory with its own production build (kept as it is).
  const given = process.env.EXPORT_BENCH_APP_DIR;
  const app = mode === "handler" ? undefined : (given ?? snapshotBuild());
  if (mode === "next" && !app) throw new Error("EXPORT_BENCH_SERVER=next but no production build with the export route");
  if (app) {
    const port = 3221;
    const child = spawn(path.join(root, "node_modules/.bin/next"), ["start", app, "-p", String(port), "-H", "127.0.0.1"], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    await waitForLine(child, /Ready|started server|Local:/i);
    return {
      kind: "next start",
      pid: child.pid!,
      base: `http://127.0.0.1:${port}`,
      stop: async () => {
        await stopGroup(child);
        if (!given) rmSync(app, { recursive: true, force: true });
      },
    };
  }
  const port = opts.port ?? 3222;
  const child = spawn(path.join(root, "node_modules/.bin/tsx"), ["--conditions=react-server", path.join(root, "bench/export-server.ts"), String(port)], {
    env,
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  await waitForLine(child, /listening/);
  return { kind: "route handler in node:http", pid: child.pid!, base: `http://127.0.0.1:${port}`, stop: () => stopGroup(child) };
}

async function stopGroup(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  try {
    process.kill(-child.pid!, "SIGTERM");
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  }, 5_000);
  await exited;
  clearTimeout(timer);
}

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

    web = await startWeb(url);
    log(`web: ${web.kind} (pid ${web.pid})`);
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
    const label = web.kind === "next start" ? "next start" : "route handler";
    return [
      {
        metric: `ms to export ${ITEMS} × ${RESULT_CHARS / 1000}k-char results over HTTP (${label}) vs psql COPY TO STDOUT`,
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
