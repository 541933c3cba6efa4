import { randomUUID } from "node:crypto";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { finishedRunRow } from "@/server/agent/runs";
import { batchSubagent } from "@/server/agent/registry";
import { claimItems, settleItems, workerPass } from "@/server/batches/claim";
import type { ClaimedItem } from "@/server/batches/types";
import { submitBatch } from "@/server/batches/submit";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeOwner, SIM_MODEL, testConfig } from "./support";

/**
 * A batch item's run row travels with its settlement and is written in the settle's own
 * transaction (run-rows.sql), one round trip for both: a deleted thread or a row already written
 * never fails the settlements it came with.
 */

let t: TestDatabase;
const config = testConfig();
const W = "run-rows-worker";

beforeAll(async () => {
  t = await createTestDatabase();
});

async function claimOne(owner: { userId: string; threadId: string }, n = 1): Promise<ClaimedItem[]> {
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(config, undefined),
    ...owner,
    input: { submission_key: randomUUID(), items: Array.from({ length: n }, (_, i) => `p${i}`) },
    config,
    model: SIM_MODEL,
  });
  await t.db.execute(sql`update subagent_batches set status = 'paused' where id <> ${batch.id} and status in ('queued', 'running')`);
  const claimed = await claimItems(t.db, { workerId: W, limit: n, leaseSeconds: 30 });
  expect(claimed).toHaveLength(n);
  return claimed;
}

function runRow(owner: { userId: string; threadId: string }, id = randomUUID()) {
  return finishedRunRow({
    id,
    userId: owner.userId,
    threadId: owner.threadId,
    kind: "batch_item",
    definition: "general",
    model: "simulator",
    prompt: "p0",
    createdAt: new Date(Date.now() - 50),
    startedAt: new Date(Date.now() - 40),
    status: "completed",
    stopReason: "stop",
    result: "done",
    usage: { inputTokens: 3, outputTokens: 4 },
    transcript: [{ role: "user", content: "p0" }],
    toolCalls: [],
  });
}

function succeeded(item: ClaimedItem, row: Record<string, unknown>) {
  return {
    kind: "succeeded" as const,
    id: item.id,
    leaseToken: item.leaseToken,
    result: "done",
    preview: "done",
    runId: row.id as string,
    runRow: row,
  };
}

describe("run rows written by the settle", () => {
  it("the worker pass writes the item's run row with its settlement, linked from the item", async () => {
    const owner = await makeOwner(t.db);
    const [item] = await claimOne(owner);
    const row = runRow(owner);
    const res = await workerPass(t.db, {
      workerId: W,
      settlements: [succeeded(item!, row)],
      marks: [],
      maxDeferrals: 3,
      run: 0,
      ahead: 0,
      leaseSeconds: 30,
    });
    expect(res.settled.get(item!.id)).toBe("succeeded");
    const [run] = await t.db.execute<Record<string, unknown>>(sql`
      select r.kind, r.status, r.result, r.input_tokens::int as input_tokens, r.transcript, r.thread_id, i.status as item_status
        from subagent_batch_items i join agent_runs r on r.id = i.run_id where i.id = ${item!.id}`);
    expect(run).toMatchObject({
      kind: "batch_item",
      status: "completed",
      result: "done",
      input_tokens: 3,
      transcript: [{ role: "user", content: "p0" }],
      thread_id: owner.threadId,
      item_status: "succeeded",
    });
  });

  it("a run row whose thread is gone, or that is already written, does not fail the settlements with it", async () => {
    const owner = await makeOwner(t.db);
    const [a, b] = await claimOne(owner, 2);
    const written = runRow(owner);
    await t.db.execute(sql`select flotilla_insert_finished_runs(${JSON.stringify([written])}::jsonb)`);
    const orphan = runRow({ userId: owner.userId, threadId: randomUUID() });
    const moved = await settleItems(t.db, {
      workerId: W,
      maxDeferrals: 3,
      settlements: [succeeded(a!, written), succeeded(b!, orphan)],
    });
    expect([...moved.values()]).toEqual(["succeeded", "succeeded"]);
    const rows = await t.db.execute<{ id: string }>(
      sql`select id from agent_runs where id in (${written.id as string}, ${orphan.id as string})`,
    );
    expect(rows.map((r) => r.id)).toEqual([written.id]);
  });
});
