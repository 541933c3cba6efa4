import { timingSafeEqual } from "node:crypto";
import http from "node:http";
import { sql } from "drizzle-orm";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { Db } from "@/server/db/client";
import { ITEM_STATUSES } from "@/server/db/schema";
import type { Settlement } from "@/server/batches/settlement";
import { loadClusterState, waitingFor } from "@/server/batches/waiting";
import { getConfig } from "@/server/config/load";
import { subagentBatches } from "@/server/db/schema";
import { type Logger, log } from "@/server/log";
import { getProcessCapacity } from "@/server/runtime/capacity";
import { INSTANCE_ID, VERSION } from "@/server/runtime/instance";

/**
 * Prometheus metrics of this process (one registry per process, on globalThis so hot-reloaded
 * route modules share it). Counters are incremented by the modules that do the work through the
 * small record* functions below; gauges are read on scrape (capacity from the process controller,
 * batch/item totals from the per-batch counters in PostgreSQL — never an item scan).
 *
 * Names are documented in docs/DEPLOYMENT.md ("Metrics").
 */

type Role = "web" | "worker" | "process";

interface MetricsState {
  registry: Registry;
  role: Role;
  db?: Db;
  claims: Counter;
  leaseRecoveries: Counter;
  attempts: Counter<"outcome">;
  deferrals: Counter<"reason">;
  modelCalls: Histogram<"endpoint" | "outcome">;
  modelTokens: Counter<"endpoint" | "direction">;
  providerRateLimited: Counter<"endpoint">;
  limiterWait: Histogram<"endpoint">;
  exportBytes: Counter;
}

const globalForMetrics = globalThis as unknown as { __flotillaMetrics?: MetricsState };

function build(): MetricsState {
  const registry = new Registry();
  const registers = [registry];
  collectDefaultMetrics({ register: registry });

  const state: MetricsState = {
    registry,
    role: "process",
    claims: new Counter({
      name: "flotilla_batch_claims_total",
      help: "Batch items this process claimed (leased) for execution.",
      registers,
    }),
    leaseRecoveries: new Counter({
      name: "flotilla_batch_lease_recoveries_total",
      help: "Expired item leases this process returned to queued (or failed at max attempts).",
      registers,
    }),
    attempts: new Counter({
      name: "flotilla_batch_attempts_total",
      help: "Finished batch item attempts in this process, by outcome.",
      labelNames: ["outcome"],
      registers,
    }),
    deferrals: new Counter({
      name: "flotilla_rate_limit_deferrals_total",
      help: "Batch items put back to queued without consuming an attempt (rate_limit: after retry-after; released: refused by capacity or interrupted by a database outage).",
      labelNames: ["reason"],
      registers,
    }),
    modelCalls: new Histogram({
      name: "flotilla_model_call_duration_seconds",
      help: "Model call latency (request start to end of response or stream), excluding rate-limit waiting.",
      labelNames: ["endpoint", "outcome"],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160],
      registers,
    }),
    modelTokens: new Counter({
      name: "flotilla_model_tokens_total",
      help: "Tokens reported by the model provider, by direction (input/output).",
      labelNames: ["endpoint", "direction"],
      registers,
    }),
    providerRateLimited: new Counter({
      name: "flotilla_model_rate_limited_total",
      help: "Provider HTTP 429 answers seen by this process.",
      labelNames: ["endpoint"],
      registers,
    }),
    limiterWait: new Histogram({
      name: "flotilla_rate_limit_wait_seconds",
      help: "Time a model call waited for the shared (cross-process) rate-limit budget.",
      labelNames: ["endpoint"],
      buckets: [0, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    }),
    exportBytes: new Counter({
      name: "flotilla_export_bytes_total",
      help: "Bytes of JSONL result exports streamed by this process.",
      registers,
    }),
  };

  new Gauge({
    name: "flotilla_info",
    help: "Constant 1, labelled with this process's identity.",
    labelNames: ["instance_id", "version", "role"],
    registers,
    collect() {
      this.reset();
      this.set({ instance_id: INSTANCE_ID, version: VERSION, role: state.role }, 1);
    },
  });

  new Gauge({
    name: "flotilla_capacity_running",
    help: "Sub-agent capacity slots held in this process.",
    registers,
    collect() {
      this.set(getProcessCapacity().stats().running);
    },
  });
  new Gauge({
    name: "flotilla_capacity_queued",
    help: "Sub-agent executions waiting for a capacity slot in this process.",
    registers,
    collect() {
      this.set(getProcessCapacity().stats().queued);
    },
  });
  new Gauge({
    name: "flotilla_capacity_max_running",
    help: "Configured subagent_runtime.max_running of this process.",
    registers,
    collect() {
      this.set(getProcessCapacity().stats().maxRunning);
    },
  });

  // Cluster-wide (same value from every process): aggregate with max(), not sum().
  // prom-client collects all metrics concurrently, so the database gauges share one snapshot
  // per scrape (three cheap queries) instead of each querying on its own.
  let snapshot: Promise<DatabaseSnapshot | undefined> | undefined;
  let snapshotAt = 0;
  const dbSnapshot = (): Promise<DatabaseSnapshot | undefined> => {
    const db = state.db;
    if (!db) return Promise.resolve(undefined);
    if (!snapshot || performance.now() - snapshotAt > 250) {
      snapshotAt = performance.now();
      snapshot = readDatabaseSnapshot(db).catch((err) => {
        // A scrape during a database restart still answers with the process-local metrics.
        log.warn({ err: (err as Error).message }, "metrics: database gauges unavailable");
        return undefined;
      });
    }
    return snapshot;
  };
  new Gauge({
    name: "flotilla_metrics_database_up",
    help: "1 when this scrape could read the database-backed gauges, else 0.",
    registers,
    async collect() {
      if (state.db) this.set((await dbSnapshot()) ? 1 : 0);
    },
  });
  new Gauge({
    name: "flotilla_metrics_scrape_database_seconds",
    help: "Time the last scrape spent reading the database-backed gauges.",
    registers,
    async collect() {
      const snap = await dbSnapshot();
      if (snap) this.set(snap.seconds);
    },
  });
  new Gauge({
    name: "flotilla_batch_items",
    help: "Batch items by status across all batches, from the per-batch counters (cluster-wide).",
    labelNames: ["status"],
    registers,
    async collect() {
      const snap = await dbSnapshot();
      if (snap) for (const status of ITEM_STATUSES) this.set({ status }, snap.items[status] ?? 0);
    },
  });
  new Gauge({
    name: "flotilla_batches",
    help: "Batches by status (cluster-wide).",
    labelNames: ["status"],
    registers,
    async collect() {
      const snap = await dbSnapshot();
      if (!snap) return;
      this.reset();
      for (const [status, n] of Object.entries(snap.batches)) this.set({ status }, n);
    },
  });
  new Gauge({
    name: "flotilla_batches_waiting",
    help: "Unfinished batches by why they wait (paused, budget, no_worker, rate_limited, capacity; moving = not waiting).",
    labelNames: ["reason"],
    registers,
    async collect() {
      const snap = await dbSnapshot();
      if (!snap) return;
      this.reset();
      for (const [reason, n] of Object.entries(snap.waiting)) this.set({ reason }, n);
    },
  });
  new Gauge({
    name: "flotilla_workers_alive",
    help: "Worker processes with a heartbeat in the last 30 s (cluster-wide).",
    registers,
    async collect() {
      const snap = await dbSnapshot();
      if (snap) this.set(snap.workers);
    },
  });
  return state;
}

interface DatabaseSnapshot {
  items: Record<string, number>;
  batches: Record<string, number>;
  /** Unfinished batches by waiting reason ("moving" when none). */
  waiting: Record<string, number>;
  workers: number;
  seconds: number;
}

/** Bound on the unfinished batches one scrape classifies (quotas keep far fewer active). */
const WAITING_SCAN_LIMIT = 10_000;

async function readDatabaseSnapshot(db: Db): Promise<DatabaseSnapshot> {
  const started = performance.now();
  const sums = ITEM_STATUSES.map((s) => `coalesce(sum(${s}_count), 0)::bigint as "${s}"`).join(", ");
  const [itemRow] = (await db.execute(sql.raw(`select ${sums} from subagent_batches`))) as unknown as Record<
    string,
    string | number
  >[];
  const items: Record<string, number> = {};
  for (const status of ITEM_STATUSES) items[status] = Number(itemRow?.[status] ?? 0);
  const batchRows = (await db.execute(
    sql`select status, count(*)::int as n from subagent_batches group by status`,
  )) as unknown as { status: string; n: number }[];
  const batches: Record<string, number> = {};
  for (const r of batchRows) batches[r.status] = Number(r.n);
  const [w] = (await db.execute(
    sql`select count(*)::int as n from worker_heartbeats
        where kind = 'worker' and stopped_at is null and last_heartbeat_at > now() - interval '30 seconds'`,
  )) as unknown as { n: number }[];
  const t = subagentBatches;
  const active = await db
    .select({
      status: t.status,
      pauseReason: t.pauseReason,
      queuedCount: t.queuedCount,
      pendingCount: t.pendingCount,
      leasedCount: t.leasedCount,
      runningCount: t.runningCount,
      executionSpec: sql<Record<string, unknown>>`jsonb_build_object('model', ${t.executionSpec}->'model')`,
    })
    .from(t)
    .where(sql`${t.status} in ('queued', 'running', 'paused')`)
    .limit(WAITING_SCAN_LIMIT);
  const waiting: Record<string, number> = {};
  if (active.length > 0) {
    const cluster = await loadClusterState(db, getConfig().subagent_batches.lease_seconds);
    for (const b of active) {
      const reason = waitingFor(b, cluster).waitingReason ?? "moving";
      waiting[reason] = (waiting[reason] ?? 0) + 1;
    }
  }
  return { items, batches, waiting, workers: Number(w?.n ?? 0), seconds: (performance.now() - started) / 1000 };
}

function state(): MetricsState {
  globalForMetrics.__flotillaMetrics ??= build();
  return globalForMetrics.__flotillaMetrics;
}

/** Names this process ("web" / "worker") and gives the database the cluster-wide gauges read on scrape. */
export function configureMetrics(options: { role?: Role; db?: Db }): void {
  const s = state();
  if (options.role) s.role = options.role;
  if (options.db) s.db = options.db;
}

// ---- one-line hooks for other modules -------------------------------------------------------

/** Claimed items (or a count); with a logger at debug, one "item claimed" line per item tying item to batch. */
export function recordClaims(
  claimed: number | ReadonlyArray<{ id: string; batchId: string; attempt: number }>,
  logger?: Logger,
): void {
  const n = typeof claimed === "number" ? claimed : claimed.length;
  if (n > 0) state().claims.inc(n);
  // Per-item lines are debug: at info they were a measurable share of a zero-latency item's CPU.
  if (logger?.isLevelEnabled("debug") && typeof claimed !== "number")
    for (const c of claimed) logger.debug({ item_id: c.id, batch_id: c.batchId, attempt: c.attempt }, "item claimed");
}

/**
 * Ended attempts as the worker settled them: `moved` maps item id → new status for the settled
 * ones (absent = the lease was no longer held, the write was fenced off). Counts attempts by
 * outcome and deferrals; with a logger, one "item settled" line per item tying item to run
 * (debug for successes, info for every other outcome).
 */
export function recordSettlements(
  settlements: ReadonlyArray<Settlement>,
  moved: ReadonlyMap<string, string>,
  logger?: Logger,
): void {
  const s = state();
  for (const st of settlements) {
    const status = moved.get(st.id);
    let outcome: string;
    if (status === undefined) outcome = "lost";
    else if (st.kind === "deferred") outcome = status === "queued" ? "deferred" : "failed";
    else if (st.kind === "released") outcome = "released";
    else if (st.kind === "failed") outcome = status === "queued" ? "retried" : "failed";
    else outcome = st.kind;
    s.attempts.inc({ outcome });
    if (outcome === "deferred") s.deferrals.inc({ reason: "rate_limit" });
    else if (outcome === "released") s.deferrals.inc({ reason: "released" });
    const level = outcome === "succeeded" ? "debug" : "info";
    if (!logger?.isLevelEnabled(level)) continue;
    logger[level](
      {
        item_id: st.id,
        run_id: "runId" in st ? (st.runId ?? undefined) : undefined,
        outcome,
        status: status ?? "unchanged",
        ...("error" in st && outcome !== "succeeded" ? { error: st.error } : {}),
      },
      "item settled",
    );
  }
}
export function recordLeaseRecoveries(n = 1): void {
  if (n > 0) state().leaseRecoveries.inc(n);
}
export function recordExportBytes(bytes: number): void {
  if (bytes > 0) state().exportBytes.inc(bytes);
}
/** Counts an export chunk's bytes and passes it through: `controller.enqueue(exportChunk(bytes))`. */
export function exportChunk(chunk: Uint8Array): Uint8Array {
  recordExportBytes(chunk.byteLength);
  return chunk;
}
export function observeModelCall(args: {
  endpoint: string;
  outcome: "ok" | "error" | "rate_limited" | "aborted";
  seconds: number;
  inputTokens?: number;
  outputTokens?: number;
}): void {
  const s = state();
  s.modelCalls.observe({ endpoint: args.endpoint, outcome: args.outcome }, args.seconds);
  if (args.inputTokens) s.modelTokens.inc({ endpoint: args.endpoint, direction: "input" }, args.inputTokens);
  if (args.outputTokens) s.modelTokens.inc({ endpoint: args.endpoint, direction: "output" }, args.outputTokens);
  if (args.outcome === "rate_limited") s.providerRateLimited.inc({ endpoint: args.endpoint });
}
export function observeRateLimitWait(endpoint: string, seconds: number): void {
  state().limiterWait.observe({ endpoint }, seconds);
}

// ---- exposition ------------------------------------------------------------------------------

export async function renderMetrics(): Promise<{ contentType: string; body: string }> {
  const { registry } = state();
  return { contentType: registry.contentType, body: await registry.metrics() };
}

/** The registry itself (tests read values with getSingleMetric). */
export function metricsRegistry(): Registry {
  return state().registry;
}

/**
 * Scrape authorization. With FLOTILLA_METRICS_TOKEN set, a request must carry
 * `Authorization: Bearer <that token>`. Without it the caller decides (the web route falls back
 * to a signed-in user; the worker port binds to loopback only).
 */
export function metricsTokenConfigured(env: Record<string, string | undefined> = process.env): boolean {
  return Boolean(env.FLOTILLA_METRICS_TOKEN);
}
export function checkMetricsToken(authorization: string | null | undefined, env: Record<string, string | undefined> = process.env): boolean {
  const expected = env.FLOTILLA_METRICS_TOKEN;
  if (!expected) return false;
  const match = /^Bearer\s+(.+)$/i.exec(authorization?.trim() ?? "");
  if (!match?.[1]) return false;
  const a = Buffer.from(match[1]);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * The worker's metrics endpoint: GET /metrics on `host:port` (host defaults to 127.0.0.1,
 * FLOTILLA_METRICS_HOST=0.0.0.0 exposes it to a remote Prometheus — then set FLOTILLA_METRICS_TOKEN).
 */
export async function startMetricsServer(options: {
  port: number;
  host?: string;
  env?: Record<string, string | undefined>;
}): Promise<{ port: number; close(): Promise<void> }> {
  const env = options.env ?? process.env;
  const host = options.host ?? env.FLOTILLA_METRICS_HOST ?? "127.0.0.1";
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (req.method !== "GET" || (path !== "/metrics" && path !== "/")) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    if (metricsTokenConfigured(env) && !checkMetricsToken(req.headers.authorization, env)) {
      res.writeHead(401, { "content-type": "text/plain", "www-authenticate": "Bearer" }).end("unauthorized\n");
      return;
    }
    renderMetrics().then(
      ({ contentType, body }) => res.writeHead(200, { "content-type": contentType }).end(body),
      (err) => {
        log.error({ err }, "metrics: render failed");
        res.writeHead(500, { "content-type": "text/plain" }).end("metrics unavailable\n");
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, host, () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : options.port;
  return {
    port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
