import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FlotillaConfig } from "@/lib/config";
import { batchSubagent } from "@/server/agent/registry";
import { getBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

/**
 * A typed batch end to end with nothing but the simulator: submitted with output_schema and a
 * judge check (judged by the simulator too), run by a real worker on PostgreSQL. Each item's
 * output is schema-valid, repaired once, or failed invalid_output; the judge follows [[judge-fail]].
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

type Row = { item_key: string; status: string; error: string | null; result: string | null; output: unknown; checks: unknown; verdict: string | null };

describe("a typed batch on the simulator", () => {
  it("stores schema-valid outputs, repairs json-once, fails invalid json with invalid_output, and judges", async () => {
    const cfg = config();
    const owner = await makeOwner(t.db);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(cfg, undefined),
      ...owner,
      input: {
        submission_key: "typed-1",
        items: [
          { item_key: "apple", prompt: "apple" },
          { item_key: "leek", prompt: 'leek [[json-once:{"label": "mineral", "name": "leek"}]]' },
          { item_key: "rock", prompt: 'rock [[json:{"label": "mineral", "name": "rock"}]]' },
          { item_key: "pear", prompt: "pear [[judge-fail]]" },
        ],
        output_schema: SCHEMA,
        checks: [{ name: "sensible", type: "judge", rubric: "Is the label right?" }],
      },
      config: cfg,
      model: SIM_MODEL,
    });
    worker = new BatchWorker({
      database: t,
      config: cfg,
      instanceId: `typed-worker-${Math.random().toString(36).slice(2, 8)}`,
      runtime: createSubagentRuntime(cfg),
      model: resolveModel(cfg, {}),
    });
    void worker.start();
    const deadline = Date.now() + 60_000;
    for (;;) {
      const b = await getBatch(t.db, { ...owner, batchId: batch.id });
      if (["completed", "failed", "cancelled"].includes(b.status)) break;
      if (Date.now() > deadline) throw new Error("the batch did not finish");
      await sleep(50);
    }
    const rows = await t.db.execute<Row>(sql`
      select item_key, status, error, result, output, checks, verdict
        from subagent_batch_items where batch_id = ${batch.id} order by position`);
    const byKey = Object.fromEntries(rows.map((r) => [r.item_key, r]));

    expect(byKey.apple).toMatchObject({
      status: "succeeded",
      output: { label: "fruit", name: "apple" },
      verdict: "passed",
      checks: [{ name: "sensible", passed: true, score: 1 }],
    });
    expect(JSON.parse(byKey.apple.result!)).toEqual(byKey.apple.output);
    // The first answer was invalid; the one repair turn fixed it.
    expect(byKey.leek).toMatchObject({ status: "succeeded", output: { label: "fruit", name: "leek" }, verdict: "passed" });
    expect(byKey.rock.status).toBe("failed");
    expect(byKey.rock.error).toBe('invalid_output: /label must be equal to one of the allowed values: "fruit", "vegetable"');
    expect(byKey.pear).toMatchObject({ status: "succeeded", verdict: "failed" });
    expect(byKey.pear.checks).toEqual([{ name: "sensible", passed: false, score: 0, reason: expect.stringMatching(/does not meet the rubric/) }]);
  }, 90_000);
});
