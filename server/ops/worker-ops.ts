import type { FlotillaConfig } from "@/lib/config";
import type { Database } from "@/server/db/client";
import { log } from "@/server/log";
import { configureMetrics, startMetricsServer } from "@/server/metrics";

/**
 * Operational wiring of a worker process, in one call from its entrypoint: the cluster-wide
 * metric gauges use the worker's database handle, and the metrics endpoint listens on
 * metrics.worker_port (0 = off). (The shared rate limiter opens its own small pool.)
 */
export async function startWorkerOps(args: {
  database: Database;
  config: FlotillaConfig;
}): Promise<{ metricsPort?: number; close(): Promise<void> }> {
  configureMetrics({ role: "worker", db: args.database.db });
  const port = args.config.metrics.worker_port;
  if (port <= 0) return { close: async () => {} };
  try {
    const server = await startMetricsServer({ port });
    log.info({ port: server.port }, "worker metrics listening");
    return { metricsPort: server.port, close: server.close };
  } catch (err) {
    // A taken port must not keep the worker from working; the operator sees why in the log.
    log.error({ port, err }, "worker metrics endpoint could not listen");
    return { close: async () => {} };
  }
}
