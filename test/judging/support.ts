import type { FlotillaConfigInput } from "@/lib/config";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";

/**
 * A judging suite's world (call it in beforeAll; stop the worker in afterAll): a migrated
 * database, a real worker on the simulator polling every 100 ms, and an owner with a thread
 * beside a stranger.
 */
export async function judgingWorld(
  instanceId: string,
  config: FlotillaConfigInput = {},
): Promise<{ t: TestDatabase; worker: BatchWorker; owner: TestUser; stranger: TestUser; thread: string }> {
  const t = await setupApiDatabase();
  const cfg = testConfig({ ...config, subagent_batches: { poll_interval_seconds: 0.1 }, simulator: { latency_ms: 1 } });
  const worker = new BatchWorker({ database: t, config: cfg, instanceId, runtime: createSubagentRuntime(cfg), model: resolveModel(cfg, {}) });
  void worker.start();
  const owner = await makeUser(t, "owner");
  const stranger = await makeUser(t, "stranger");
  const thread = await makeThread(t, owner);
  await workerAlive(t);
  return { t, worker, owner, stranger, thread };
}
