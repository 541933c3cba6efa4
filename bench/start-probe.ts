/**
 * Where a one-item batch's created_at -> started_at goes, part by part (issue 44, helper h44t).
 * In one process: a submitter (submitBatch, as the route calls it) and a BatchWorker with the
 * production executor (simulator, latency 0). Timestamps are this host's clock: PostgreSQL's
 * now() and Date.now() read the same one. postgres.js `debug` gives the time each statement is
 * handed to the socket (it writes at the next setImmediate). Run:
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres PROBE_ROUNDS=60 \
 *     npx tsx --conditions=react-server bench/start-probe.ts
 */
import { drizzle } from "drizzle-orm/postgres-js";
import net from "node:net";
import postgres from "postgres";
import { configSchema } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { submitBatch } from "@/server/batches/submit";
import type { Database } from "@/server/db/client";
import * as schema from "@/server/db/schema";
import { log } from "@/server/log";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { subagentItemExecutor } from "@/server/worker/execute";
import { BatchWorker } from "@/server/worker/loop";
import { benchServer, freshDatabase, owner } from "./batch.bench";

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function database(url: string, name: string, onSend: (q: string) => void): Database {
  const sql = postgres(url, {
    max: 10,
    onnotice: () => {},
    connection: { application_name: name },
    debug: (_c, q) => onSend(q),
  });
  return { sql, db: drizzle(sql, { schema }), close: () => sql.end({ timeout: 5 }) };
}

/** PROBE_WIRE: every socket write and read of the submitter's connections, to count the round trips. */
function traceWire(note: (line: string) => void) {
  const write = net.Socket.prototype.write;
  const emit = net.Socket.prototype.emit;
  net.Socket.prototype.write = function (this: net.Socket, chunk: unknown, ...rest: unknown[]) {
    const text = Buffer.isBuffer(chunk) ? chunk.toString("latin1").replace(/[^ -~]+/g, ".").slice(0, 70) : "";
    if (/begin|commit|insert|select|pg_|^B/.test(text)) note(`  W ${text}`);
    return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
  } as typeof write;
  net.Socket.prototype.emit = function (this: net.Socket, event: string | symbol, ...args: unknown[]) {
    if (event === "data" && Buffer.isBuffer(args[0]))
      note(`  R ${(args[0] as Buffer).toString("latin1").replace(/[^ -~]+/g, ".").slice(0, 70)}`);
    return (emit as (...a: unknown[]) => boolean).call(this, event, ...args);
  } as typeof emit;
}

async function main() {
  const rounds = Number(process.env.PROBE_ROUNDS ?? 60);
  const server = await benchServer();
  const bdb = await freshDatabase(server.adminUrl);
  const config = configSchema.parse({ simulator: { latency_ms: 0 }, subagent_batches: { poll_interval_seconds: 5 } });
  let mark: Record<string, number> = {};
  let trace: [number, string][] = [];
  const submitter = database(bdb.url, "probe-submit", (q) => {
    const k = /^\s*begin/i.test(q) ? "begin" : /^\s*commit/i.test(q) ? "commit" : undefined;
    if (k && mark[k] === undefined) {
      mark[k] = now();
      const u = process.cpuUsage();
      mark[`${k}Cpu`] = (u.user + u.system) / 1000;
    }
    if (process.env.PROBE_TRACE) trace.push([now(), q.replace(/\s+/g, " ").slice(0, 90)]);
  });
  const workerDb = database(bdb.url, "probe-worker", (q) => {
    if (q.includes("flotilla_worker_pass") && mark.notified !== undefined && mark.passSent === undefined) mark.passSent = now();
  });
  const runtime = createSubagentRuntime(config);
  if (process.env.PROBE_WIRE) traceWire((line) => trace.push([now(), line]));
  const inner = subagentItemExecutor({ db: workerDb.db, runtime });
  const worker = new BatchWorker({
    database: workerDb,
    config,
    instanceId: "probe-worker",
    runtime,
    executor: (ctx) => {
      mark.executor ??= now();
      return inner({
        ...ctx,
        onStarted: async () => {
          mark.started ??= now();
          await ctx.onStarted?.();
        },
      });
    },
    logger: log.child({}, { level: "warn" }),
  });
  // Registered before the worker's own listener: called first, when the notification arrives.
  await workerDb.sql.listen("flotilla_batches", () => {
    mark.notified ??= now();
  });
  await worker.start();
  const scope = await owner(submitter.db);
  const rows: Record<string, number>[] = [];
  for (let i = 0; i < rounds + 10; i++) {
    mark = {};
    mark.call = now();
    const { batch } = await submitBatch(submitter.db, {
      ...batchSubagent(config, "general"),
      ...scope,
      input: { submission_key: `probe-${i}`, items: ["one"] },
      config,
      model: { name: "simulator", simulator: true },
    });
    mark.returned = now();
    for (;;) {
      const [r] = await submitter.sql<{ created: number; done: boolean }[]>`
        select extract(epoch from b.created_at) * 1000 as created, b.finished_at is not null as done
          from subagent_batches b where b.id = ${batch.id}`;
      if (r?.done) {
        mark.created = Number(r.created);
        break;
      }
      await sleep(5);
    }
    if (i >= 10) rows.push(mark);
    if (process.env.PROBE_TRACE && i >= rounds + 7) {
      for (const [t, q] of trace) console.log(`${(t - mark.created!).toFixed(2).padStart(8)} ${q}`);
      console.log(`${(mark.returned! - mark.created!).toFixed(2).padStart(8)} returned`);
    }
    trace = [];
    await sleep(50);
  }
  const parts: [string, string, string][] = [
    ["submitBatch called -> begin sent", "call", "begin"],
    ["begin sent -> created_at (server)", "begin", "created"],
    ["created_at -> commit sent", "created", "commit"],
    ["commit sent -> submitBatch returned", "commit", "returned"],
    ["created_at -> notification received", "created", "notified"],
    ["notification -> pass sent", "notified", "passSent"],
    ["pass sent -> executor entered", "passSent", "executor"],
    ["executor entered -> onStarted", "executor", "started"],
    ["created_at -> onStarted (the row)", "created", "started"],
    ["process CPU, begin sent -> commit sent", "beginCpu", "commitCpu"],
  ];
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.ceil(xs.length * 0.95) - 1]!;
  console.log(`rounds ${rows.length}, load ${(await import("node:fs")).readFileSync("/proc/loadavg", "utf8").trim()}`);
  for (const [name, a, b] of parts) {
    const xs = rows.filter((r) => r[a] !== undefined && r[b] !== undefined).map((r) => r[b]! - r[a]!);
    console.log(`${name.padEnd(40)} p50 ${med(xs).toFixed(2).padStart(7)}  p95 ${p95(xs).toFixed(2).padStart(7)}  (n ${xs.length})`);
  }
  await worker.stop();
  await submitter.close();
  await workerDb.close();
  await bdb.close();
  await server.stop();
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
