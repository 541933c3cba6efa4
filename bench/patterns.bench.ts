import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import { promisify } from "node:util";
import { sql } from "drizzle-orm";
import { createApiToken } from "@/server/auth/tokens";
import { createDatabase } from "@/server/db/client";
import { benchServer, freshDatabase, owner } from "./batch.bench";
import type { BenchRow } from "./types";
import { benchEnv } from "./web";

/**
 * Compiled schemas and patterns are freed (DESIGN.md "Holding under abuse (third round)"):
 * 1,000 distinct output schemas submitted one after another, over HTTP, to the web process as
 * `npm start` runs it (`node --import tsx scripts/web.ts`: Next's production server behind the
 * front door) and run by a real worker (`server/worker/main.ts`). Each submission has its own
 * schema (a `pattern` of about 3,900 RE2 instructions and a `minimum` of its own) and its own
 * regex check (about 1,000), and one item whose typed answer the worker validates and checks; so
 * the web compiles every schema and pattern at submission and the worker compiles them again to
 * run the item. Kept for good, 1,000 such schemas would hold about a gigabyte of RE2 programs.
 *
 * Measured: each process's RSS after a warm-up of 50 such submissions and after the 1,000, both
 * after full garbage collections (HeapProfiler.collectGarbage through each process's inspector,
 * `--inspect=127.0.0.1:0`; the processes run unmodified). Target: each grows at most 128 MB
 * (ratio = growth / 128 MB ≤ 1). Before this budget, one web process grew 288 → 775 MB on sixteen
 * patterns alone.
 *
 * Needs a production build (`next build`). PATTERNS_BENCH_SCHEMAS sets the count (default 1,000).
 */

export const name = "patterns";

const SCHEMAS = Number(process.env.PATTERNS_BENCH_SCHEMAS ?? 1_000);
const WARMUP = 50;
const BUDGET_MB = 128;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

interface Proc {
  role: string;
  child: ChildProcess;
  /** The inspector's WebSocket URL (from the process's "Debugger listening on" line). */
  inspector: Promise<string>;
}

/** `node --inspect=127.0.0.1:0 --import tsx <entry>`, its stderr passed on except the inspector's lines. */
function start(role: string, entry: string, env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, ["--inspect=127.0.0.1:0", "--import", "tsx", entry], { env, stdio: ["ignore", "ignore", "pipe"] });
  const inspector = new Promise<string>((resolve, reject) => {
    let buffered = "";
    child.stderr!.on("data", (d: Buffer) => {
      buffered += String(d);
      let nl = buffered.indexOf("\n");
      while (nl >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        const ws = /Debugger listening on (ws:\/\/\S+)/.exec(line);
        if (ws) resolve(ws[1]!);
        else if (!/^For help, see|^Debugger (attached|ending)|^Waiting for the debugger/.test(line)) process.stderr.write(`[${role}] ${line}\n`);
        nl = buffered.indexOf("\n");
      }
    });
    child.once("exit", (code) => reject(new Error(`${role} exited (${code}) before its inspector listened`)));
  });
  return { role, child, inspector };
}

// Run in a separate node with WebSocket (Node 20 has it behind a flag): full GCs, then the pid.
const GC_SCRIPT = `
const ws = new WebSocket(process.argv[1]);
let id = 0;
const pending = new Map();
ws.onmessage = (e) => { const m = JSON.parse(e.data); pending.get(m.id)?.(m); pending.delete(m.id); };
const call = (method, params = {}) => new Promise((r) => { pending.set(++id, r); ws.send(JSON.stringify({ id, method, params })); });
ws.onerror = (e) => { console.error(String(e.message ?? e)); process.exit(1); };
ws.onopen = async () => {
  for (let i = 0; i < 3; i++) await call("HeapProfiler.collectGarbage");
  const pid = await call("Runtime.evaluate", { expression: "process.pid", returnByValue: true });
  console.log(pid.result.result.value);
  ws.close();
  process.exit(0);
};`;

const execFileAsync = promisify(execFile);

/** Full GCs in the process, then its RSS (MB). */
async function rssAfterGc(p: Proc): Promise<number> {
  const { stdout } = await execFileAsync(process.execPath, ["--experimental-websocket", "--no-warnings", "-e", GC_SCRIPT, await p.inspector]);
  if (Number(stdout.trim()) !== p.child.pid) throw new Error(`${p.role}: the inspector answered for pid ${stdout.trim()}`);
  await sleep(500);
  return rssMb(p.child.pid!);
}

function rssMb(pid: number, field = "VmRSS"): number {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]) / 1024;
}

function stop(p: Proc): Promise<void> {
  return new Promise((resolve) => {
    if (p.child.exitCode !== null || p.child.signalCode !== null) return resolve();
    p.child.once("exit", () => resolve());
    p.child.kill("SIGTERM");
  });
}

// 245 three-letter words: an alternation of about 1,000 RE2 instructions.
const WORDS = Array.from({ length: 245 }, (_, i) => `${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}q`).join("|");

/**
 * The submission for schema `i`: a schema, patterns and a check no other submission has, near
 * the pattern budget (the schema's pattern about 3,900 instructions, the check's about 1,000), so
 * compiled patterns that were never freed would show at once (5 MB of programs per 1,000).
 */
function submission(i: number, tag: string) {
  const prefix = `C${tag}${i}-`;
  const code = `${prefix}aaqbaqcaqdaq`;
  return {
    submission_key: `patterns-${tag}-${i}`,
    items: [`[[json:${JSON.stringify({ code, n: i })}]] schema ${tag}${i}`],
    output_schema: {
      type: "object",
      properties: {
        code: { type: "string", pattern: `^${prefix}(?:${WORDS}){4}$` },
        n: { type: "integer", minimum: i },
      },
      required: ["code", "n"],
    },
    checks: [{ name: "prefix", type: "regex", pattern: `^${prefix}(?:${WORDS})`, path: "/code" }],
  };
}

export async function run(): Promise<BenchRow[]> {
  if (!existsSync(".next/BUILD_ID")) throw new Error("bench patterns: no production build in this checkout; run `npx next build` first");
  const pg = await benchServer();
  const bench = await freshDatabase(pg.adminUrl);
  const db = createDatabase(bench.url, { max: 2 });
  const procs: Proc[] = [];
  try {
    const scope = await owner(db.db);
    const token = await createApiToken(db.db, { userId: scope.userId });
    const port = await freePort();
    const env = benchEnv({
      DATABASE_URL: bench.url,
      PORT: String(port),
      FLOTILLA__QUOTAS__MAX_ACTIVE_BATCHES: "100000",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
    });
    const web = start("web", "scripts/web.ts", env);
    const worker = start("worker", "server/worker/main.ts", env);
    procs.push(web, worker);
    const origin = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 180_000;
    for (;;) {
      try {
        if ((await fetch(`${origin}/api/health`)).ok) break;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) throw new Error("the web process did not come up in 180 s");
      await sleep(250);
    }

    const submitAll = async (count: number, tag: string): Promise<number[]> => {
      const ms: number[] = [];
      for (let i = 0; i < count; i++) {
        const started = performance.now();
        const res = await fetch(`${origin}/api/threads/${scope.threadId}/subagent-batches`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: JSON.stringify(submission(i, tag)),
        });
        if (res.status !== 201) throw new Error(`submission ${tag}${i}: ${res.status} ${await res.text()}`);
        ms.push(performance.now() - started);
      }
      return ms;
    };
    const settled = async (): Promise<{ total: number; passed: number }> => {
      const wait = Date.now() + 600_000;
      for (;;) {
        const [row] = await db.db.execute<{ open: number; total: number; passed: number }>(sql`
          select count(*) filter (where i.status not in ('succeeded', 'failed', 'cancelled'))::int as open,
                 count(*)::int as total, count(*) filter (where i.verdict = 'passed')::int as passed
            from subagent_batch_items i`);
        if (row!.open === 0) return row!;
        if (Date.now() > wait) throw new Error(`${row!.open} items still open after 10 minutes`);
        await sleep(500);
      }
    };

    await submitAll(WARMUP, "w");
    await settled();
    const before = { web: await rssAfterGc(web), worker: await rssAfterGc(worker) };
    const load = os.loadavg();
    const started = performance.now();
    const ms = await submitAll(SCHEMAS, "s");
    const submitted = performance.now() - started;
    const done = await settled();
    const after = { web: await rssAfterGc(web), worker: await rssAfterGc(worker) };
    const peak = { web: rssMb(web.child.pid!, "VmHWM"), worker: rssMb(worker.child.pid!, "VmHWM") };
    if (done.total !== WARMUP + SCHEMAS || done.passed !== done.total) {
      const odd = await db.db.execute(sql`
        select status, error, checks from subagent_batch_items where verdict is distinct from 'passed' limit 5`);
      throw new Error(`expected ${WARMUP + SCHEMAS} items passing their check, got ${done.passed} of ${done.total}: ${JSON.stringify(odd)}`);
    }
    const sorted = [...ms].sort((a, b) => a - b);
    process.stderr.write(
      `  ${SCHEMAS} submissions in ${(submitted / 1000).toFixed(1)} s (median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(0)} ms, max ${sorted.at(-1)!.toFixed(0)} ms), ` +
        `load average ${load.map((l) => l.toFixed(2)).join(" ")} → ${os
          .loadavg()
          .map((l) => l.toFixed(2))
          .join(" ")}\n` +
        `  web RSS ${before.web.toFixed(0)} → ${after.web.toFixed(0)} MB (peak ${peak.web.toFixed(0)}), worker ${before.worker.toFixed(0)} → ${after.worker.toFixed(0)} MB (peak ${peak.worker.toFixed(0)})\n`,
    );
    const row = (role: "web" | "worker"): BenchRow => {
      const growth = after[role] - before[role];
      return {
        metric: `${role} RSS growth (MB, after full GCs) over ${SCHEMAS} distinct output schemas (~5,000 pattern instructions each) submitted one after another (${before[role].toFixed(0)} → ${after[role].toFixed(0)} MB) vs ${BUDGET_MB} MB`,
        ours: growth,
        baseline: BUDGET_MB,
        ratio: growth / BUDGET_MB,
        target: 1,
      };
    };
    return [row("web"), row("worker")];
  } finally {
    await Promise.all(procs.map(stop));
    await db.close();
    await bench.close();
    await pg.stop();
  }
}
