import { timingSafeEqual } from "node:crypto";
import http from "node:http";
import { sql } from "drizzle-orm";
import { Gauge } from "prom-client";
import type { Db } from "@/server/db/client";
import { ITEM_STATUSES } from "@/server/db/schema";
import { loadClusterState, waitingFor } from "@/server/batches/waiting";
import { getConfig } from "@/server/config/load";
import { subagentBatches } from "@/server/db/schema";
import { metricsRegistry } from "@/server/instruments";
import { log } from "@/server/log";
import { getProcessCapacity } from "@/server/runtime/capacity";
import { type LearnedLimit, readLearnedLimits } from "@/server/runtime/rate-limit";
import { INSTANCE_ID, VERSION } from "@/server/runtime/instance";

/**
 * Prometheus exposition of this process: the gauges read on scrape (capacity from the process
 * controller, batch/item totals from the per-batch counters in PostgreSQL — never an item scan),
 * the web route's and the worker port's rendering, and scrape authorization. The counters the
 * working modules bump live below this, in server/instruments.ts, on the same registry.
 *
 * Names are documented in docs/DEPLOYMENT.md ("Metrics").
 */

type Role = "web" | "worker" | "process";

interface ExpositionState {
  role: Role;
  db?: Db;
  gauges: boolean;
}

const globalForMetrics = globalThis as unknown as { __flotillaMetrics?: ExpositionState };

function state(): ExpositionState {
  globalForMetrics.__flotillaMetrics ??= { role: "process", gauges: false };
  const s = globalForMetrics.__flotillaMetrics;
  if (!s.gauges) {
    s.gauges = true;
    registerGauges(s);
  }
  return s;
}

/** The gauges read on scrape, on the process registry (server/instruments.ts holds the counters). */
function registerGauges(state: ExpositionState): void {
  const registers = [metricsRegistry()];
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

  const capacityGauges = [
    ["flotilla_capacity_running", "Sub-agent capacity slots held in this process.", "running"],
    ["flotilla_capacity_queued", "Sub-agent executions waiting for a capacity slot in this process.", "queued"],
    ["flotilla_capacity_max_running", "Configured subagent_runtime.max_running of this process.", "maxRunning"],
  ] as const;
  for (const [name, help, stat] of capacityGauges)
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(getProcessCapacity().stats()[stat]);
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
        log.warn({ err }, "metrics: database gauges unavailable");
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
  // One number read from the snapshot (left as it was when the database did not answer).
  const fromSnapshot = (name: string, help: string, pick: (snap: DatabaseSnapshot) => number) =>
    new Gauge({
      name,
      help,
      registers,
      async collect() {
        const snap = await dbSnapshot();
        if (snap) this.set(pick(snap));
      },
    });
  fromSnapshot(
    "flotilla_metrics_scrape_database_seconds",
    "Time the last scrape spent reading the database-backed gauges.",
    (snap) => snap.seconds,
  );
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
  // Counts by one label, replaced whole on each scrape (a status or reason that went away reads absent, not stale).
  const countsByLabel = (name: string, help: string, label: string, pick: (snap: DatabaseSnapshot) => Record<string, number>) =>
    new Gauge({
      name,
      help,
      labelNames: [label],
      registers,
      async collect() {
        const snap = await dbSnapshot();
        if (!snap) return;
        this.reset();
        for (const [value, n] of Object.entries(pick(snap))) this.set({ [label]: value }, n);
      },
    });
  countsByLabel("flotilla_batches", "Batches by status (cluster-wide).", "status", (snap) => snap.batches);
  countsByLabel(
    "flotilla_batches_waiting",
    "Unfinished batches by why they wait (paused, budget, no_worker, rate_limited, capacity; moving = not waiting).",
    "reason",
    (snap) => snap.waiting,
  );
  // The limits learned from providers' headers, replaced whole on each scrape.
  const learnedGauge = (name: string, help: string, pick: (l: LearnedLimit) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ["endpoint", "model", "kind"],
      registers,
      async collect() {
        const snap = await dbSnapshot();
        if (!snap) return;
        this.reset();
        for (const l of snap.learned) this.set({ endpoint: l.endpoint, model: l.model, kind: l.kind }, pick(l));
      },
    });
  learnedGauge(
    "flotilla_provider_limit",
    "Per-minute limits the provider's own rate-limit headers state, per endpoint, model and kind (requests, tokens, input_tokens, output_tokens).",
    (l) => l.perMinute,
  );
  learnedGauge(
    "flotilla_provider_limit_share",
    "Share of each learned limit the shared limiter paces at now (below 1 while the provider's remaining says another program drains the key).",
    (l) => l.share,
  );
  fromSnapshot(
    "flotilla_workers_alive",
    "Worker processes with a heartbeat in the last 30 s (cluster-wide).",
    (snap) => snap.workers,
  );
}

interface DatabaseSnapshot {
  items: Record<string, number>;
  batches: Record<string, number>;
  /** Unfinished batches by waiting reason ("moving" when none). */
  waiting: Record<string, number>;
  workers: number;
  learned: LearnedLimit[];
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
  const learned = await readLearnedLimits(db);
  return { items, batches, waiting, workers: Number(w?.n ?? 0), learned, seconds: (performance.now() - started) / 1000 };
}

/** Names this process ("web" / "worker") and gives the database the cluster-wide gauges read on scrape. */
export function configureMetrics(options: { role?: Role; db?: Db }): void {
  const s = state();
  if (options.role) s.role = options.role;
  if (options.db) s.db = options.db;
}

// ---- exposition ------------------------------------------------------------------------------

export async function renderMetrics(): Promise<{ contentType: string; body: string }> {
  state();
  const registry = metricsRegistry();
  return { contentType: registry.contentType, body: await registry.metrics() };
}

export { metricsRegistry };

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
