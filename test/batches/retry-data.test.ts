import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FlotillaConfig } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { projectBatch } from "@/server/batches/projection";
import { getBatch, retryBatch, retryItem } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

/**
 * Retries of a typed batch with a real worker on PostgreSQL and the simulator: the judge fails
 * the item whose prompt holds [[judge-fail]]; a retry by that check runs it again (and it fails
 * again), a retry of the item with a corrected input runs the new prompt and passes. The batch's
 * verdict and per-check counts follow, and every attempt stays in the history.
 */

let t: TestDatabase;
let worker: BatchWorker | undefined;

beforeAll(async () => {
  t = await createTestDatabase({ max: 10 });
});
afterAll(async () => {
  await worker?.stop({ waitMs: 2_000 });
});

const SCHEMA = {
  type: "object",
  properties: { label: { enum: ["fruit", "vegetable"] }, name: { type: "string", maxLength: 30 } },
  required: ["label", "name"],
  additionalProperties: false,
};

function config(): FlotillaConfig {
  return testConfig({
    subagent_runtime: { max_running: 4 },
    subagent_batches: { poll_interval_seconds: 0.1, lease_seconds: 5, max_attempts: 2 },
    simulator: { latency_ms: 5 },
  });
}

describe("retrying a typed batch", () => {
  it("re-runs the items a check failed, and an item with a corrected input, keeping every attempt", async () => {
    const cfg = config();
    const owner = await makeOwner(t.db);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(cfg, undefined),
      ...owner,
      input: {
        submission_key: "retry-data-1",
        items: ["apple", "pear [[judge-fail]]", "leek"],
        prompt_template: "Name the produce: {{item}}",
        output_schema: SCHEMA,
        checks: [{ name: "sensible", type: "judge", rubric: "Is the label right?" }],
      },
      config: cfg,
      model: SIM_MODEL,
    });
    const scope = { ...owner, batchId: batch.id };
    worker = new BatchWorker({
      database: t,
      config: cfg,
      instanceId: `retry-worker-${Math.random().toString(36).slice(2, 8)}`,
      runtime: createSubagentRuntime(cfg),
      model: resolveModel(cfg, {}),
    });
    void worker.start();
    const settled = async () => {
      const deadline = Date.now() + 60_000;
      for (;;) {
        const b = await getBatch(t.db, scope);
        if (["completed", "failed", "cancelled"].includes(b.status)) return projectBatch(t.db, { batch: b, leaseSeconds: 5 });
        if (Date.now() > deadline) throw new Error("the batch did not finish");
        await sleep(50);
      }
    };
    const attempts = async (position: number) => {
      const [row] = await t.db.execute<{ n: number }>(sql`
        select count(*)::int as n from subagent_batch_item_attempts a
          join subagent_batch_items it on it.id = a.item_id
         where it.batch_id = ${batch.id} and it.position = ${position}`);
      return row!.n;
    };
    const pear = async () => {
      const [row] = await t.db.execute<{ id: string; prompt: string; verdict: string | null; status: string }>(sql`
        select id, prompt, verdict, status from subagent_batch_items where batch_id = ${batch.id} and position = 2`);
      return row!;
    };

    let b = await settled();
    expect(b.status).toBe("completed");
    expect(b.verdicts).toEqual({ passed: 2, failed: 1 });
    expect(b.checks).toEqual([{ name: "sensible", passed: 2, failed: 1, agreement: null }]);
    expect(await attempts(2)).toBe(1);

    // By the check: only the pear runs again, and the judge fails it again.
    const { retried } = await retryBatch(t.db, { ...scope, filter: { check: "sensible" }, config: cfg });
    expect(retried).toBe(1);
    b = await settled();
    expect(b.verdicts).toEqual({ passed: 2, failed: 1 });
    expect(b.checks).toEqual([{ name: "sensible", passed: 2, failed: 1, agreement: null }]);
    expect(await attempts(2)).toBe(2);
    expect(await attempts(1)).toBe(1);

    // With a corrected input: the prompt is rebuilt from the template and the judge passes it.
    const { item } = await retryItem(t.db, { ...scope, itemId: (await pear()).id, input: "pear", config: cfg });
    expect(item.input).toBe("pear");
    expect((await pear()).prompt).toBe("Name the produce: pear");
    b = await settled();
    expect(b.status).toBe("completed");
    expect(b.verdicts).toEqual({ passed: 3, failed: 0 });
    expect(b.checks).toEqual([{ name: "sensible", passed: 3, failed: 0, agreement: null }]);
    expect(await pear()).toMatchObject({ status: "succeeded", verdict: "passed" });
    expect(await attempts(2)).toBe(3);
  }, 120_000);
});
