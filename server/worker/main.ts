import { ConfigError, getConfig } from "@/server/config/load";
import { createDatabase, databaseUrlFromEnv } from "@/server/db/client";
import { log } from "@/server/log";
import { startWorkerOps } from "@/server/ops/worker-ops";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { assertConfiguredOutputSchemas } from "@/server/runtime/output-schema";
import { initTelemetry, shutdownTelemetry } from "@/server/telemetry";
import { closeMcpClients } from "@/server/tools/mcp";
import { BatchWorker, stallMsOf } from "./loop";
import { startWatchdog } from "./watchdog";

/**
 * Worker entrypoint: `npm run worker`. Never imports Next.js. Runs the batch worker against
 * DATABASE_URL until SIGTERM / SIGINT, then stops claiming, aborts its local runs, hands their
 * rows back to `queued` (attempt restored), marks its heartbeat stopped and exits. A worker whose
 * passes keep failing for a minute does the same and exits with 1 (passes that wait on a lock
 * another session holds are not failing: they wait it out); one whose loop stalls (no pass
 * ends for subagent_batches.worker_stall_seconds) is killed by its watchdog (./watchdog.ts).
 */
async function main() {
  let config: ReturnType<typeof getConfig>;
  try {
    config = getConfig();
    assertConfiguredOutputSchemas(config);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(1);
    }
    throw err;
  }
  await initTelemetry("flotilla-worker");
  const b = config.subagent_batches;
  // Every statement of the worker is bounded, so a pass waiting on a lock or a slow query is
  // abandoned (and retried by the loop) instead of holding the loop forever. The lock wait ends
  // first (at most nine tenths of the statement's time): a lock someone else holds is waited out,
  // while a pass too slow on its own counts toward a restart (./loop.ts).
  const statementTimeoutMs = b.worker_statement_timeout_seconds * 1000;
  const database = createDatabase(databaseUrlFromEnv(), {
    applicationName: "flotilla-worker",
    statementTimeoutMs,
    lockTimeoutMs: Math.min(b.worker_lock_timeout_seconds * 1000, statementTimeoutMs * 0.9),
  });
  await startWorkerOps({ database, config }); // shared rate limiter, metrics gauges + port
  // Passes failing for a minute: exit non-zero, so `npm start` (scripts/start.ts) starts a fresh worker.
  // A loop that stops making progress (a pass that never ends, a blocked event loop) ends the process.
  const watchdog = startWatchdog({ id: INSTANCE_ID, stallMs: stallMsOf(config) });
  const worker = new BatchWorker({
    database,
    config,
    onPassEnded: watchdog.progress,
    onStuck: (ms) => void stop(`passes failing for ${Math.round(ms / 1000)} s`, 1),
  });
  await worker.start();
  log.info({ worker_id: INSTANCE_ID }, `worker ${INSTANCE_ID} started (capacity ${config.subagent_runtime.max_running})`);

  let stopping = false;
  const stop = async (why: string, code = 0) => {
    if (stopping) return;
    stopping = true;
    if (code === 0) log.info({ worker_id: INSTANCE_ID }, `worker ${INSTANCE_ID} stopping on ${why}`);
    else log.error({ worker_id: INSTANCE_ID }, `worker ${INSTANCE_ID} stopping: ${why}; exiting with ${code}`);
    try {
      await worker.stop();
    } catch (err) {
      log.error({ err }, "worker stop failed");
    }
    // After the runs stopped: no tool call is still waiting on an MCP server.
    await closeMcpClients().catch((err) => log.warn({ err }, "closing MCP clients failed"));
    await database.close().catch(() => {});
    await shutdownTelemetry().catch((err) => log.warn({ err }, "flushing traces failed"));
    process.exit(code);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
