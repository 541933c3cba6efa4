import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { type SubmitBatchInput, batchProjectionSchema, itemProjectionSchema } from "@/lib/api/batches";
import {
  claimItems,
  findLostLeases,
  markRunning,
  recoverExpiredLeases,
  renewLeases,
  settleItems,
} from "@/server/batches/claim";
import { toBatchProjection, toItemProjection } from "@/server/batches/projection";
import { cancelBatch, getBatch, listBatches, listItems, pauseBatch, resumeBatch, retryItem } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { parseExecutionSpec } from "@/server/batches/spec";
import { markSettlementsSeen } from "@/server/batches/unseen";
import type { ClaimedItem } from "@/server/batches/types";
import { AppError } from "@/server/errors";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { exportLines } from "../helpers/export";
import { counterDrift, itemsOf, makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

let t: TestDatabase;
const config = testConfig({ subagent_batches: { max_items_per_batch: 50, max_attempts: 3 } });
const W1 = "worker-one";
const W2 = "worker-two";

beforeAll(async () => {
  t = await createTestDatabase();
});

let keyCounter = 0;
function input(items: SubmitBatchInput["items"], extra: Partial<SubmitBatchInput> = {}): SubmitBatchInput {
  keyCounter += 1;
  return { submission_key: `key-${keyCounter}`, items, ...extra };
}

async function submit(owner: { userId: string; threadId: string }, body: SubmitBatchInput, cfg = config) {
  return submitBatch(t.db, { ...batchSubagent(cfg, body.subagent), ...owner, input: body, config: cfg, model: SIM_MODEL });
}

async function expectAppError(p: Promise<unknown>, code: string, message?: RegExp) {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).code).toBe(code);
  if (message) expect((err as AppError).message).toMatch(message);
}

async function countRows(table: "subagent_batches" | "subagent_batch_items"): Promise<number> {
  const [row] = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from ${sql.identifier(table)}`);
  return row!.n;
}

/** Isolates a test's claims from other batches left active by earlier tests. */
async function quiesceOthers(keep: string) {
  await t.db.execute(sql`update subagent_batches set status = 'paused' where id <> ${keep} and status in ('queued', 'running')`);
}

const succeed = (c: ClaimedItem, text = `done ${c.itemKey}`) => ({
  kind: "succeeded" as const,
  id: c.id,
  leaseToken: c.leaseToken,
  result: text,
  preview: text.slice(0, 10),
  model: "simulator",
  stopReason: "stop",
  usage: { inputTokens: 10, outputTokens: 5 },
});
const fail = (c: ClaimedItem, retryable = true) => ({
  kind: "failed" as const,
  id: c.id,
  leaseToken: c.leaseToken,
  error: `boom ${c.itemKey}`,
  retryable,
  usage: { inputTokens: 1, outputTokens: 0 },
});

describe("submission", () => {
  it("writes the batch and every item in one go: positions, default keys, template, live window, spec", async () => {
    const owner = await makeOwner(t.db);
    const { batch, created } = await submit(
      owner,
      input(["alpha", "beta", "gamma", "delta", "epsilon"], { prompt_template: "Summarize {{item}} now", max_live_items: 2, max_running_items: 1 }),
    );
    expect(created).toBe(true);
    expect(batch).toMatchObject({ total: 5, status: "queued", queuedCount: 2, pendingCount: 3, maxLiveItems: 2, maxRunningItems: 1, maxAttempts: 3, subagent: "general" });
    const items = await itemsOf(t.db, batch.id);
    expect(items.map((i) => [i.position, i.item_key, i.status])).toEqual([
      [1, "item-1", "queued"],
      [2, "item-2", "queued"],
      [3, "item-3", "pending"],
      [4, "item-4", "pending"],
      [5, "item-5", "pending"],
    ]);
    const [prompt] = await t.db.execute<{ prompt: string }>(sql`select prompt from subagent_batch_items where batch_id = ${batch.id} and position = 3`);
    expect(prompt!.prompt).toBe("Summarize gamma now");
    const spec = parseExecutionSpec(batch.executionSpec);
    expect(spec.subagent.name).toBe("general");
    expect(spec.caller).toMatchObject({ user_id: owner.userId, thread_id: owner.threadId, origin: "api", role: "owner" });
    expect(spec.delegation).toEqual({ task: false, agent_swarm: false, batch_task: false });
    expect(spec.model.name).toBe("simulator");
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });

  it("keeps explicit keys and defaults only the missing ones; objects carry their own prompts", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input([{ item_key: "a", prompt: "first" }, { prompt: "second" }, "third"], { subagent: "summarizer" }));
    const items = await itemsOf(t.db, batch.id);
    expect(items.map((i) => i.item_key)).toEqual(["a", "item-2", "item-3"]);
    expect(batch.subagent).toBe("summarizer");
  });

  it("is idempotent per (user, submission_key): a replay returns the original batch and writes nothing", async () => {
    const owner = await makeOwner(t.db);
    const body = input(["x", "y"]);
    const first = await submit(owner, body);
    const before = await countRows("subagent_batch_items");
    const again = await submit(owner, { ...body, items: ["completely", "different", "items"] });
    expect(again.created).toBe(false);
    expect(again.batch.id).toBe(first.batch.id);
    expect(again.batch.total).toBe(2);
    expect(await countRows("subagent_batch_items")).toBe(before);
    // Concurrent replays race on the unique index: exactly one creates.
    const racing = input(["r1", "r2", "r3"]);
    const results = await Promise.all([submit(owner, racing), submit(owner, racing), submit(owner, racing)]);
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(new Set(results.map((r) => r.batch.id)).size).toBe(1);
    // The same key from another user is a different submission.
    const other = await makeOwner(t.db);
    expect((await submit(other, body)).created).toBe(true);
    // The same key in another thread of the same user is a conflict, not a silent replay.
    const [thread] = await t.db.execute<{ id: string }>(sql`insert into threads (user_id) values (${owner.userId}) returning id`);
    await expectAppError(submitBatch(t.db, { ...batchSubagent(config, body.subagent), userId: owner.userId, threadId: thread!.id, input: body, config, model: SIM_MODEL }), "conflict", /submission_key/);
  });

  it("rejects bad input naming the field, with nothing written", async () => {
    const owner = await makeOwner(t.db);
    const batches = await countRows("subagent_batches");
    const items = await countRows("subagent_batch_items");
    await expectAppError(submit(owner, input([{ item_key: "k", prompt: "a" }, { item_key: "k", prompt: "b" }])), "validation_failed", /items\.1: duplicate item_key "k" \(first used by items\.0\)/);
    // An explicit key colliding with a default one is a duplicate too.
    await expectAppError(submit(owner, input([{ item_key: "item-2", prompt: "a" }, "b"])), "validation_failed", /duplicate item_key "item-2"/);
    await expectAppError(submit(owner, input(Array.from({ length: 51 }, (_, i) => `i${i}`))), "validation_failed", /items: at most 50/);
    await expectAppError(submit(owner, input([])), "validation_failed", /items/);
    await expectAppError(submit(owner, input(["a"], { max_live_items: 1001 })), "validation_failed", /max_live_items/);
    await expectAppError(submit(owner, input(["a"], { max_running_items: 65 })), "validation_failed", /max_running_items/);
    await expectAppError(submit(owner, input(["a"], { max_running_items: 0 })), "validation_failed", /max_running_items/);
    await expectAppError(submit(owner, input(["a"], { prompt_template: "no placeholder" })), "validation_failed", /prompt_template/);
    await expectAppError(submit(owner, input(["a"], { subagent: "nope" })), "validation_failed", /subagent: unknown sub-agent "nope"/);
    await expectAppError(submit(owner, input([""])), "validation_failed", /items\.0/);
    expect(await countRows("subagent_batches")).toBe(batches);
    expect(await countRows("subagent_batch_items")).toBe(items);
  });

  it("refuses a thread that is not the caller's", async () => {
    const owner = await makeOwner(t.db);
    const stranger = await makeOwner(t.db);
    await expectAppError(submitBatch(t.db, { userId: stranger.userId, threadId: owner.threadId, input: input(["a"]), config, ...batchSubagent(config, undefined), model: SIM_MODEL }), "not_found");
  });

  it("inserts thousands of items with one statement", async () => {
    const owner = await makeOwner(t.db);
    const big = testConfig({ subagent_batches: { max_items_per_batch: 5000 } });
    const started = performance.now();
    const { batch } = await submit(owner, input(Array.from({ length: 5000 }, (_, i) => `record ${i}`), { prompt_template: "Check {{item}}" }), big);
    const elapsed = performance.now() - started;
    expect(batch.total).toBe(5000);
    expect(batch.queuedCount + batch.pendingCount).toBe(5000);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
    expect(elapsed).toBeLessThan(5_000);
  });
});

describe("claiming", () => {
  it("separates total, live, leased and running", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(Array.from({ length: 10 }, (_, i) => `p${i}`), { max_live_items: 4, max_running_items: 2 }));
    await quiesceOthers(batch.id);
    const first = await claimItems(t.db, { workerId: W1, limit: 10, leaseSeconds: 30 });
    expect(first.map((c) => c.position)).toEqual([1, 2]);
    expect(first.every((c) => c.attempt === 1)).toBe(true);
    let b = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(b).toMatchObject({ status: "running", total: 10, pendingCount: 6, queuedCount: 2, leasedCount: 2, runningCount: 0 });
    expect(b.startedAt).not.toBeNull();
    // The running limit counts leased rows: nothing more for anyone.
    expect(await claimItems(t.db, { workerId: W2, limit: 10, leaseSeconds: 30 })).toEqual([]);
    const running = await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: [first[0]!] });
    expect([...running]).toEqual([first[0]!.id]);
    b = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(b).toMatchObject({ leasedCount: 1, runningCount: 1 });
    expect(await claimItems(t.db, { workerId: W2, limit: 10, leaseSeconds: 30 })).toEqual([]);
    expect((await settleItems(t.db, { workerId: W1, maxDeferrals: 3, settlements: [succeed(first[0]!)] })).has(first[0]!.id)).toBe(true);
    // One slot frees: the window refills from pending (position 5) and position 3 is leased.
    const next = await claimItems(t.db, { workerId: W2, limit: 10, leaseSeconds: 30 });
    expect(next.map((c) => c.position)).toEqual([3]);
    b = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(b).toMatchObject({ pendingCount: 5, queuedCount: 2, leasedCount: 2, runningCount: 0, succeededCount: 1 });
    const live = (await itemsOf(t.db, batch.id)).filter((i) => ["queued", "leased", "running"].includes(i.status));
    expect(live.map((i) => i.position)).toEqual([2, 3, 4, 5]);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
    expect(b.inputTokens).toBe(10);
    expect(b.outputTokens).toBe(5);
  });

  it("never claims paused or cancelled batches, and resume restarts claims", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(["a", "b", "c"], { max_running_items: 3 }));
    await quiesceOthers(batch.id);
    const scope = { ...owner, batchId: batch.id };
    expect((await pauseBatch(t.db, scope)).status).toBe("paused");
    expect((await pauseBatch(t.db, scope)).status).toBe("paused");
    expect(await claimItems(t.db, { workerId: W1, limit: 5, leaseSeconds: 30 })).toEqual([]);
    expect((await resumeBatch(t.db, scope)).status).toBe("queued");
    const claimed = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 });
    expect(claimed).toHaveLength(1);
    await pauseBatch(t.db, scope);
    // A held lease still starts and finishes while paused; only new claims stop.
    expect((await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: claimed })).size).toBe(1);
    expect(await claimItems(t.db, { workerId: W1, limit: 5, leaseSeconds: 30 })).toEqual([]);
    expect((await resumeBatch(t.db, scope)).status).toBe("running");
    await cancelBatch(t.db, scope);
    expect(await claimItems(t.db, { workerId: W1, limit: 5, leaseSeconds: 30 })).toEqual([]);
    await expectAppError(pauseBatch(t.db, scope), "conflict");
    await expectAppError(resumeBatch(t.db, scope), "conflict");
  });

  it("shares a worker fairly across active batches", async () => {
    const owner = await makeOwner(t.db);
    const a = (await submit(owner, input(Array.from({ length: 20 }, (_, i) => `a${i}`), { max_running_items: 20 }))).batch;
    const b = (await submit(owner, input(Array.from({ length: 20 }, (_, i) => `b${i}`), { max_running_items: 20 }))).batch;
    await t.db.execute(sql`update subagent_batches set status = 'paused' where id not in (${a.id}, ${b.id}) and status in ('queued', 'running')`);
    const claimed = await claimItems(t.db, { workerId: W1, limit: 10, leaseSeconds: 30 });
    expect(claimed.filter((c) => c.batchId === a.id)).toHaveLength(5);
    expect(claimed.filter((c) => c.batchId === b.id)).toHaveLength(5);
    // With room for only one item per call, successive calls alternate between the batches.
    const order: string[] = [];
    for (let i = 0; i < 4; i++) order.push(...(await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 })).map((c) => c.batchId));
    expect(order).toHaveLength(4);
    expect(order[0]).not.toBe(order[1]);
    expect(order[1]).not.toBe(order[2]);
    expect(order[2]).not.toBe(order[3]);
    await cancelBatch(t.db, { ...owner, batchId: a.id });
    await cancelBatch(t.db, { ...owner, batchId: b.id });
  });

  it("never exceeds the running limit with many claimers at once (audited inside Postgres)", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(Array.from({ length: 40 }, (_, i) => `c${i}`), { max_running_items: 5, max_live_items: 12 }));
    await quiesceOthers(batch.id);
    await installAudit(batch.id);
    const workers = Array.from({ length: 8 }, (_, i) => `claimer-${i}`);
    let done = 0;
    await Promise.all(
      workers.map(async (w) => {
        while (done < 40) {
          const got = await claimItems(t.db, { workerId: w, limit: 3, leaseSeconds: 30 });
          if (got.length === 0) {
            await sleep(2);
            continue;
          }
          await markRunning(t.db, { workerId: w, leaseSeconds: 30, items: got });
          await sleep(1);
          const moved = await settleItems(t.db, { workerId: w, settlements: got.map((c) => succeed(c)), maxDeferrals: 3 });
          done += moved.size;
        }
      }),
    );
    const [audit] = await t.db.execute<{ max_live: number; max_held: number }>(
      sql`select max(held)::int as max_held, max(live)::int as max_live from h4_audit where batch_id = ${batch.id}`,
    );
    expect(audit!.max_held).toBeGreaterThan(0);
    expect(audit!.max_held).toBeLessThanOrEqual(5);
    expect(audit!.max_live).toBeLessThanOrEqual(12);
    await t.db.execute(sql`drop trigger h4_audit_trg on subagent_batch_items`);
    const b = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(b).toMatchObject({ status: "completed", succeededCount: 40 });
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });
});

/** A statement-level trigger recording the real held (leased + running) and live counts after every change. */
async function installAudit(batchId: string) {
  await t.db.execute(sql`create table if not exists h4_audit (batch_id uuid, held int, live int, at timestamptz default clock_timestamp())`);
  await t.db.execute(sql.raw(`
    create or replace function h4_audit_fn() returns trigger language plpgsql as $$
    begin
      insert into h4_audit (batch_id, held, live)
      select i.batch_id, count(*) filter (where i.status in ('leased', 'running')), count(*) filter (where i.status in ('queued', 'leased', 'running'))
        from subagent_batch_items i where i.batch_id = '${batchId}' group by i.batch_id;
      return null;
    end $$`));
  await t.db.execute(sql`drop trigger if exists h4_audit_trg on subagent_batch_items`);
  await t.db.execute(sql`create trigger h4_audit_trg after update on subagent_batch_items for each statement execute function h4_audit_fn()`);
}

describe("leases and fencing", () => {
  it("recovers an expired lease with stable identity and the attempt advanced, then fails at max_attempts", async () => {
    const owner = await makeOwner(t.db);
    const cfg = testConfig({ subagent_batches: { max_attempts: 2 } });
    const { batch } = await submit(owner, input(["only"]), cfg);
    await quiesceOthers(batch.id);
    const [c1] = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 0.2 });
    expect(c1!.attempt).toBe(1);
    await markRunning(t.db, { workerId: W1, leaseSeconds: 0.2, items: [c1!] });
    expect(await recoverExpiredLeases(t.db)).toEqual({ requeued: 0, failed: 0 });
    await sleep(300);
    expect(await recoverExpiredLeases(t.db)).toEqual({ requeued: 1, failed: 0 });
    let [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ id: c1!.id, item_key: "item-1", position: 1, status: "queued", attempts: 1, lease_owner: null });
    expect(row!.error).toMatch(/lease expired on attempt 1 of 2.*retrying/);
    // The old holder is fenced out everywhere.
    expect(await findLostLeases(t.db, { workerId: W1, items: [c1!] })).toEqual([c1!.id]);
    expect((await settleItems(t.db, { workerId: W1, maxDeferrals: 3, settlements: [succeed(c1!)] })).has(c1!.id)).toBe(false);
    expect(await renewLeases(t.db, { workerId: W1, leaseSeconds: 30, items: [c1!] })).toEqual({ renewed: [], lost: [c1!.id] });

    const [c2] = await claimItems(t.db, { workerId: W2, limit: 1, leaseSeconds: 0.2 });
    expect(c2).toMatchObject({ id: c1!.id, itemKey: "item-1", attempt: 2 });
    expect(c2!.leaseToken).toBeGreaterThan(c1!.leaseToken);
    await markRunning(t.db, { workerId: W2, leaseSeconds: 0.2, items: [c2!] });
    await sleep(300);
    expect(await recoverExpiredLeases(t.db)).toEqual({ requeued: 0, failed: 1 });
    [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ status: "failed", attempts: 2 });
    expect(row!.error).toMatch(/lease expired on attempt 2 of 2 .*no attempts left/);
    const b = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(b).toMatchObject({ status: "failed", failedCount: 1 });
    expect(b.finishedAt).not.toBeNull();
    const history = await t.db.execute<{ attempt: number; outcome: string; worker_id: string }>(
      sql`select attempt, outcome, worker_id from subagent_batch_item_attempts where item_id = ${c1!.id} order by id`,
    );
    expect(history.map((h) => [h.attempt, h.outcome, h.worker_id])).toEqual([
      [1, "lease_expired", W1],
      [2, "lease_expired", W2],
    ]);
  });

  it("an expired claim cannot be marked running", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(["x"]));
    await quiesceOthers(batch.id);
    const [c] = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 0.2 });
    await sleep(300);
    expect((await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: [c!] })).size).toBe(0);
    // Another worker's token or a stale token cannot start it either.
    const [again] = await claimItems(t.db, { workerId: W2, limit: 1, leaseSeconds: 0.2 }).then(async (r) => {
      if (r.length) return r;
      await recoverExpiredLeases(t.db);
      return claimItems(t.db, { workerId: W2, limit: 1, leaseSeconds: 30 });
    });
    expect((await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: [again!] })).size).toBe(0);
    expect((await markRunning(t.db, { workerId: W2, leaseSeconds: 30, items: [{ id: again!.id, leaseToken: c!.leaseToken }] })).size).toBe(0);
    expect((await markRunning(t.db, { workerId: W2, leaseSeconds: 30, items: [again!] })).size).toBe(1);
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
  });

  it("renews all of a worker's leases in one statement", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(["a", "b", "c"], { max_running_items: 3 }));
    await quiesceOthers(batch.id);
    const claimed = await claimItems(t.db, { workerId: W1, limit: 3, leaseSeconds: 0.5 });
    await markRunning(t.db, { workerId: W1, leaseSeconds: 0.5, items: claimed.slice(0, 1) });
    for (let i = 0; i < 3; i++) {
      await sleep(250);
      const r = await renewLeases(t.db, { workerId: W1, leaseSeconds: 0.5, items: claimed });
      expect(r.renewed.sort()).toEqual(claimed.map((c) => c.id).sort());
    }
    expect(await recoverExpiredLeases(t.db)).toEqual({ requeued: 0, failed: 0 });
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
  });

  it("retries failures while attempts remain, then fails terminally", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(["flaky"]));
    await quiesceOthers(batch.id);
    for (let attempt = 1; attempt <= 3; attempt++) {
      const [c] = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 });
      expect(c!.attempt).toBe(attempt);
      await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: [c!] });
      const moved = await settleItems(t.db, { workerId: W1, settlements: [fail(c!)], maxDeferrals: 3 });
      expect(moved.get(c!.id)).toBe(attempt < 3 ? "queued" : "failed");
    }
    expect(await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 })).toEqual([]);
    const [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ status: "failed", attempts: 3, error: "boom item-1" });
    const b = await getBatch(t.db, { ...owner, batchId: batch.id });
    expect(b).toMatchObject({ status: "failed", failedCount: 1, inputTokens: 3 });
    const outcomes = await t.db.execute<{ outcome: string }>(sql`select outcome from subagent_batch_item_attempts where item_id = ${row!.id} order by id`);
    expect(outcomes.map((o) => o.outcome)).toEqual(["retry", "retry", "failed"]);
  });

  it("admission refusal requeues without consuming an attempt; rate limits defer up to max_deferrals", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(["busy"]));
    await quiesceOthers(batch.id);
    const [c1] = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 });
    expect((await settleItems(t.db, { workerId: W1, maxDeferrals: 0, settlements: [{ kind: "released", id: c1!.id, leaseToken: c1!.leaseToken }] })).has(c1!.id)).toBe(true);
    let [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ status: "queued", attempts: 0, lease_owner: null });
    const [c2] = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 });
    expect(c2!.attempt).toBe(1);
    // Deferred: not claimable until available_at, attempt refunded.
    expect((await settleItems(t.db, { workerId: W1, maxDeferrals: 1, settlements: [{ kind: "deferred", id: c2!.id, leaseToken: c2!.leaseToken, delayMs: 400, error: "429" }] })).has(c2!.id)).toBe(true);
    [row] = await itemsOf(t.db, batch.id);
    expect(row).toMatchObject({ status: "queued", attempts: 0 });
    expect(row!.available_at).not.toBeNull();
    expect(await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 })).toEqual([]);
    await sleep(450);
    const [c3] = await claimItems(t.db, { workerId: W1, limit: 1, leaseSeconds: 30 });
    expect(c3!.attempt).toBe(1);
    // Past max_deferrals a rate limit counts as a failed attempt.
    const moved = await settleItems(t.db, {
      workerId: W1,
      settlements: [{ kind: "deferred", id: c3!.id, leaseToken: c3!.leaseToken, delayMs: 0, error: "429" }],
      maxDeferrals: 1,
    });
    expect(moved.get(c3!.id)).toBe("queued");
    [row] = await itemsOf(t.db, batch.id);
    expect(row!.attempts).toBe(1);
    expect(row!.error).toMatch(/max_deferrals/);
    await cancelBatch(t.db, { ...owner, batchId: batch.id });
  });

  it("cancel terminalizes in-flight items in one transaction and fences a late completion", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(Array.from({ length: 8 }, (_, i) => `c${i}`), { max_live_items: 5, max_running_items: 3 }));
    await quiesceOthers(batch.id);
    const claimed = await claimItems(t.db, { workerId: W1, limit: 3, leaseSeconds: 30 });
    await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: claimed.slice(0, 2) });
    const scope = { ...owner, batchId: batch.id };
    const cancelled = await cancelBatch(t.db, scope);
    expect(cancelled).toMatchObject({ status: "cancelled", cancelledCount: 8, pendingCount: 0, queuedCount: 0, leasedCount: 0, runningCount: 0 });
    expect(cancelled.finishedAt).not.toBeNull();
    expect(await findLostLeases(t.db, { workerId: W1, items: claimed })).toHaveLength(3);
    const late = await settleItems(t.db, { workerId: W1, settlements: claimed.map((c) => succeed(c)), maxDeferrals: 3 });
    expect(late.size).toBe(0);
    const rows = await itemsOf(t.db, batch.id);
    expect(rows.every((r) => r.status === "cancelled" && r.result === null && r.lease_owner === null)).toBe(true);
    expect((await getBatch(t.db, scope)).status).toBe("cancelled");
    expect((await cancelBatch(t.db, scope)).status).toBe("cancelled");
    const history = await t.db.execute<{ n: number }>(sql`select count(*)::int as n from subagent_batch_item_attempts where batch_id = ${batch.id} and outcome = 'cancelled'`);
    expect(history[0]!.n).toBe(3);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
    await expectAppError(retryItem(t.db, { ...scope, itemId: claimed[0]!.id, config }), "conflict");
  });

  it("settles a batch of outcomes in one call and applies the terminal rules", async () => {
    const owner = await makeOwner(t.db);
    const mixed = (await submit(owner, input(["ok", "bad", "worse"], { max_running_items: 3 }))).batch;
    await quiesceOthers(mixed.id);
    const c = await claimItems(t.db, { workerId: W1, limit: 3, leaseSeconds: 30 });
    await markRunning(t.db, { workerId: W1, leaseSeconds: 30, items: c });
    const moved = await settleItems(t.db, { workerId: W1, settlements: [succeed(c[0]!), fail(c[1]!, false), fail(c[2]!, false)], maxDeferrals: 3 });
    expect([...moved.values()].sort()).toEqual(["failed", "failed", "succeeded"]);
    let b = await getBatch(t.db, { ...owner, batchId: mixed.id });
    expect(b).toMatchObject({ status: "completed", succeededCount: 1, failedCount: 2 });

    // Retry of a failed item reopens the finished batch with fresh attempts.
    const failedItem = c[1]!;
    const retried = await retryItem(t.db, { ...owner, batchId: mixed.id, itemId: failedItem.id, config });
    expect(retried.batch.status).toBe("running");
    expect(retried.batch.finishedAt).toBeNull();
    expect(retried.item).toMatchObject({ status: "queued", attempts: 0, error: null, itemKey: "item-2" });
    const [again] = await claimItems(t.db, { workerId: W2, limit: 1, leaseSeconds: 30 });
    expect(again).toMatchObject({ id: failedItem.id, attempt: 1 });
    await settleItems(t.db, { workerId: W2, settlements: [succeed(again!)], maxDeferrals: 3 });
    b = await getBatch(t.db, { ...owner, batchId: mixed.id });
    expect(b).toMatchObject({ status: "completed", succeededCount: 2, failedCount: 1 });
    await expectAppError(retryItem(t.db, { ...owner, batchId: mixed.id, itemId: c[0]!.id, config }), "conflict", /only a failed item/);

    const allBad = (await submit(owner, input(["x", "y"], { max_running_items: 2 }))).batch;
    await quiesceOthers(allBad.id);
    const d = await claimItems(t.db, { workerId: W1, limit: 2, leaseSeconds: 30 });
    await settleItems(t.db, { workerId: W1, settlements: d.map((x) => fail(x, false)), maxDeferrals: 3 });
    expect((await getBatch(t.db, { ...owner, batchId: allBad.id })).status).toBe("failed");
    await expectAppError(cancelBatch(t.db, { ...owner, batchId: allBad.id }), "conflict");
  });
});

describe("reads", () => {
  it("pages items by position with an opaque cursor and a status filter, bounded previews", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(Array.from({ length: 7 }, (_, i) => `r${i}`), { max_running_items: 7, max_live_items: 7 }));
    await quiesceOthers(batch.id);
    const scope = { ...owner, batchId: batch.id };
    const c = await claimItems(t.db, { workerId: W1, limit: 3, leaseSeconds: 30 });
    await settleItems(t.db, {
      workerId: W1,
      settlements: [{ ...succeed(c[0]!), preview: "p".repeat(5000) }, succeed(c[1]!), fail(c[2]!, false)],
      maxDeferrals: 3,
    });
    const first = await listItems(t.db, { ...scope, limit: 3 });
    expect(first.items.map((i) => i.position)).toEqual([1, 2, 3]);
    expect(first.items[0]!.preview).toHaveLength(2000);
    expect(first.nextCursor).toEqual(expect.any(String));
    const second = await listItems(t.db, { ...scope, limit: 3, cursor: first.nextCursor });
    expect(second.items.map((i) => i.position)).toEqual([4, 5, 6]);
    const last = await listItems(t.db, { ...scope, limit: 3, cursor: second.nextCursor });
    expect(last.items.map((i) => i.position)).toEqual([7]);
    expect(last.nextCursor).toBeNull();
    const failed = await listItems(t.db, { ...scope, status: "failed" });
    expect(failed.items.map((i) => i.itemKey)).toEqual(["item-3"]);
    for (const item of first.items) expect(itemProjectionSchema.parse(toItemProjection(item))).toBeTruthy();
    expect(JSON.stringify(first)).not.toContain("done item-1");
    await expectAppError(listItems(t.db, { ...scope, cursor: "garbage!" }), "validation_failed", /cursor/);
    await expectAppError(listItems(t.db, { ...scope, limit: 201 }), "validation_failed", /limit/);
    await expectAppError(listItems(t.db, { ...scope, status: "weird" }), "validation_failed", /status/);

    const projection = toBatchProjection(await getBatch(t.db, scope));
    expect(batchProjectionSchema.parse(projection)).toBeTruthy();
    expect(projection).toMatchObject({ total: 7, terminal: 3, live: 4, progress: 42.9, counts: { succeeded: 2, failed: 1, queued: 4 } });
    const text = JSON.stringify(projection);
    for (const secret of ["execution", "submission", "prompt", "lease_", "user_id"]) expect(text).not.toContain(secret);
  });

  it("exports full results in position order, a bounded page at a time", async () => {
    const owner = await makeOwner(t.db);
    const { batch } = await submit(owner, input(Array.from({ length: 12 }, (_, i) => `e${i}`), { max_running_items: 12, max_live_items: 12 }));
    await quiesceOthers(batch.id);
    const c = await claimItems(t.db, { workerId: W1, limit: 12, leaseSeconds: 30 });
    await settleItems(t.db, { workerId: W1, settlements: c.map((x) => succeed(x, `full result ${x.itemKey} ${"z".repeat(3000)}`)), maxDeferrals: 3 });
    const lines = await exportLines(t.sql, batch.id, 5);
    expect(lines.map((l) => l.position)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(lines[0]!.result).toMatch(/^full result item-1 z{3000}$/);
    expect(lines[0]).toMatchObject({ status: "succeeded", attempts: 1, usage: { input_tokens: 10, output_tokens: 5 } });
  });

  it("scopes every read and control to the owner and the thread", async () => {
    const owner = await makeOwner(t.db);
    const stranger = await makeOwner(t.db);
    const { batch } = await submit(owner, input(["secret"]));
    const [item] = await itemsOf(t.db, batch.id);
    const [otherThread] = await t.db.execute<{ id: string }>(sql`insert into threads (user_id) values (${owner.userId}) returning id`);
    const wrong = [
      { userId: stranger.userId, threadId: owner.threadId, batchId: batch.id },
      { userId: stranger.userId, threadId: stranger.threadId, batchId: batch.id },
      { userId: owner.userId, threadId: otherThread!.id, batchId: batch.id },
      { userId: owner.userId, threadId: owner.threadId, batchId: "not-a-uuid" },
    ];
    for (const scope of wrong) {
      await expectAppError(getBatch(t.db, scope), "not_found");
      await expectAppError(listItems(t.db, scope), "not_found");
      await expectAppError(pauseBatch(t.db, scope), "not_found");
      await expectAppError(resumeBatch(t.db, scope), "not_found");
      await expectAppError(cancelBatch(t.db, scope), "not_found");
      await expectAppError(retryItem(t.db, { ...scope, itemId: item!.id, config }), "not_found");
    }
    expect(await listBatches(t.db, { userId: stranger.userId, threadId: owner.threadId })).toEqual([]);
    expect(await listBatches(t.db, { userId: owner.userId, threadId: otherThread!.id })).toEqual([]);
    expect((await listBatches(t.db, owner)).map((b) => b.id)).toContain(batch.id);
    // The settled badge is cleared only from the owner's own thread.
    await t.db.execute(sql`update subagent_batches set unseen_settlement = true where id = ${batch.id}`);
    expect(await markSettlementsSeen(t.db, { userId: stranger.userId, threadId: owner.threadId })).toBe(0);
    expect(await markSettlementsSeen(t.db, { userId: owner.userId, threadId: otherThread!.id })).toBe(0);
    expect(await markSettlementsSeen(t.db, owner)).toBe(1);
    // An item id of another batch is not found through this batch.
    const other = (await submit(owner, input(["other"]))).batch;
    const [otherItem] = await itemsOf(t.db, other.id);
    await expectAppError(retryItem(t.db, { ...owner, batchId: batch.id, itemId: otherItem!.id, config }), "not_found");
    expect((await getBatch(t.db, { ...owner, batchId: batch.id })).status).toBe("queued");
  });
});
