import { getConfig } from "@/server/config/load";
import { createDatabase, databaseUrlFromEnv } from "@/server/db/client";
import { getSubagentRuntime } from "@/server/runtime/admission";
import type { ItemExecutor } from "@/server/worker/execute";
import { BatchWorker } from "@/server/worker/loop";

/**
 * Benchmark-only worker process: the real BatchWorker (claim, lease, mark running, renew,
 * settle, across processes through Postgres) with a simulated-latency executor instead of the
 * model: it takes a slot of the process capacity exactly like the sub-agent executor, reports
 * the start, and answers after the item's [[sleep:MS]]. This isolates the scheduler from the
 * executor's own per-item work, which bench/batch.bench.ts measures separately (end to end).
 */

const SLEEP = /\[\[sleep:(\d+)\]\]/;

async function main() {
  const config = getConfig();
  const database = createDatabase(databaseUrlFromEnv(), { applicationName: "flotilla-bench-worker" });
  const runtime = getSubagentRuntime();
  const executor: ItemExecutor = async ({ item, signal, onStarted }) => {
    const release = await runtime.capacity.acquire({ signal });
    try {
      await onStarted();
      const ms = Number(SLEEP.exec(item.prompt)?.[1] ?? 0);
      await new Promise((resolve) => setTimeout(resolve, ms));
      return { status: "completed", text: `done ${item.itemKey}`, usage: { inputTokens: 1, outputTokens: 1 }, model: "sleep", stopReason: "stop" };
    } finally {
      release();
    }
  };
  const worker = new BatchWorker({ database, config, runtime, executor });
  await worker.start();
  const stop = async () => {
    await worker.stop();
    await database.close();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop());
  process.on("SIGINT", () => void stop());
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
