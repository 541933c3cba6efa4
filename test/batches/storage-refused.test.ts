import { batchSubagent } from "@/server/agent/registry";
import { sql } from "drizzle-orm";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import type { FlotillaConfig } from "@/lib/config";
import { claimItems, workerPass } from "@/server/batches/claim";
import type { Settlement } from "@/server/batches/settlement";
import { submitBatch } from "@/server/batches/submit";
import { storable, storableJson, storableText } from "@/server/db/storable";
import { resolveModel } from "@/server/models/index";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { type ItemExecutor, subagentItemExecutor } from "@/server/worker/execute";
import { BatchWorker } from "@/server/worker/loop";
import { settleEach } from "@/server/worker/settle";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { counterDrift, itemsOf, makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

/**
 * Any text is storable: the one sanitizer (server/db/storable.ts) against what PostgreSQL really
 * refuses, and the worker's defence behind it: a pass PostgreSQL refuses for one row settles
 * the others and fails that item alone (`storage_refused`, server/worker/settle.ts), and a worker
 * whose passes keep failing stops heartbeating and gives up (onStuck).
 */

let t: TestDatabase;
const workers: BatchWorker[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop({ waitMs: 2_000 })));
  await t.db.execute(sql`drop trigger if exists refuse_claims on subagent_batch_items`);
  await t.db.execute(sql`update subagent_batches set status = 'cancelled' where status in ('queued', 'running', 'paused')`);
});

const FFFD = "\ufffd";
const config = testConfig({
  subagent_runtime: { max_running: 4 },
  subagent_batches: { poll_interval_seconds: 0.1, lease_seconds: 5, max_attempts: 3 },
  simulator: { latency_ms: 5 },
});

let keys = 0;
async function submit(owner: { userId: string; threadId: string }, items: string[], cfg: FlotillaConfig = config) {
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(cfg, undefined),
    ...owner,
    input: { submission_key: `refused-${++keys}`, items, max_running_items: 8 },
    config: cfg,
    model: SIM_MODEL,
  });
  return batch;
}

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

const settledItems = (batchId: string) =>
  until("every item to end", async () => {
    const rows = await itemsOf(t.db, batchId);
    return rows.every((r) => r.status === "succeeded" || r.status === "failed") && rows;
  });

describe("storable text against PostgreSQL", () => {
  const nasty = ["x\u0000y", "\u0000\u0000", "\ud800", "a\udc00b", "\udc00\ud800", "\\\u0000", "end\ud83d"];
  const fine = ["plain", "\u{1F600} pair", "\\u0000 (six characters)", "\\\\ud800 too", "tab\tnewline\n\u0001"];

  it("PostgreSQL refuses the raw values; their storable forms are stored, with U+FFFD in place of each bad unit", async () => {
    for (const s of nasty) {
      const value = { [s]: [s, { nested: s }] };
      await expect(t.sql`select ${JSON.stringify(value)}::text::jsonb`, s).rejects.toThrow(/json|unicode/i);
      const [row] = await t.sql<{ v: unknown }[]>`select ${storableJson(value)}::text::jsonb as v`;
      expect(row!.v).toEqual(storable(value));
      expect(JSON.stringify(row!.v)).not.toMatch(/\\u0000|\\ud[89a-f]/);
      const [text] = await t.sql<{ v: string }[]>`select ${storableText(s)}::text as v`;
      expect(text!.v).toBe(storableText(s));
    }
    await expect(t.sql`select ${"x\u0000y"}::text`).rejects.toThrow(/0x00/);
    expect(storableText("x\u0000y")).toBe(`x${FFFD}y`);
    expect(storableText("a\udc00b\ud800")).toBe(`a${FFFD}b${FFFD}`);
    expect(storableText("\\\u0000")).toBe(`\\${FFFD}`);
  });

  it("leaves every other text as it is, and a clean value is the same object", async () => {
    for (const s of fine) {
      const value = { [s]: [s, { nested: s }], n: 1, d: null };
      expect(storableText(s)).toBe(s);
      expect(storable(value)).toBe(value);
      expect(storableJson(value)).toBe(JSON.stringify(value));
      const [row] = await t.sql<{ v: unknown }[]>`select ${storableJson(value)}::text::jsonb as v`;
      expect(row!.v).toEqual(value);
    }
  });
});

describe("a pass PostgreSQL refuses", () => {
  /** What the sanitizer cannot help: a run row the database refuses (here an id that is no uuid). */
  const poisoned = (s: Settlement): Settlement => ({ ...s, runRow: { id: "not-a-uuid", user_id: null } });

  it("settleEach settles the good rows and fails only the refused one, storage_refused and not retried", async () => {
    const owner = await makeOwner(t.db);
    const batch = await submit(owner, ["one", "two", "three"]);
    const claimed = await claimItems(t.db, { workerId: "w-refused", limit: 3, leaseSeconds: 30 });
    expect(claimed).toHaveLength(3);
    const settlements: Settlement[] = claimed.map((c) => ({
      kind: "succeeded",
      id: c.id,
      leaseToken: c.leaseToken,
      result: `answer ${c.position}`,
      preview: `answer ${c.position}`,
      usage: { inputTokens: 3, outputTokens: 4 },
    }));
    const bad = claimed.find((c) => c.position === 2)!;
    settlements[claimed.indexOf(bad)] = poisoned(settlements[claimed.indexOf(bad)]!);

    // The batched round trip refuses all of them together, and moves nothing.
    const pass = { workerId: "w-refused", settlements, marks: [], maxDeferrals: 3, run: 0, ahead: 0, leaseSeconds: 30 };
    await expect(workerPass(t.db, pass)).rejects.toThrow(/uuid/);
    expect((await itemsOf(t.db, batch.id)).map((r) => r.status)).toEqual(["leased", "leased", "leased"]);

    const each = await settleEach(t.db, { workerId: "w-refused", settlements, maxDeferrals: 3 });
    expect(each.refused).toEqual([bad.id]);
    expect(each.dropped).toEqual([]);
    expect(each.unsettled).toEqual([]);
    const rows = await itemsOf(t.db, batch.id);
    expect(rows.map((r) => [r.status, r.attempts, r.result])).toEqual([
      ["succeeded", 1, "answer 1"],
      // One attempt of three used, and failed for good: another would store the same thing.
      ["failed", 1, null],
      ["succeeded", 1, "answer 3"],
    ]);
    expect(rows[1]!.error).toMatch(/^storage_refused: invalid input syntax for type uuid/);
    const [usage] = await t.sql<{ input_tokens: number }[]>`select input_tokens::int from subagent_batch_items where id = ${bad.id}`;
    expect(usage!.input_tokens).toBe(3);
    expect(await counterDrift(t.db, batch.id)).toEqual({});
  });

  it("a worker whose pass is refused fails only that item and goes on: another batch finishes after it", async () => {
    const owner = await makeOwner(t.db);
    const stuck: number[] = [];
    // The real executor for every item; the one asking for it gets a run row PostgreSQL refuses.
    const runtime = createSubagentRuntime(config);
    const real = subagentItemExecutor({ db: t.db, model: resolveModel(config, {}), runtime });
    const executor: ItemExecutor = async (ctx) => {
      const result = await real(ctx);
      return ctx.item.prompt.includes("poison") ? { ...result, runRow: { id: "not-a-uuid" } } : result;
    };
    const worker = new BatchWorker({
      database: t,
      config,
      instanceId: "w-goes-on",
      runtime,
      executor,
      onStuck: (ms) => stuck.push(ms),
    });
    workers.push(worker);
    await worker.start();
    const first = await submit(owner, ["a [[sleep:50]]", "poison [[sleep:50]]", "c [[sleep:50]]"]);
    const rows = await settledItems(first.id);
    expect(rows.map((r) => r.status)).toEqual(["succeeded", "failed", "succeeded"]);
    expect(rows[1]!.error).toMatch(/^storage_refused: /);
    const second = await submit(owner, ["after one", "after two"]);
    expect((await settledItems(second.id)).map((r) => r.status)).toEqual(["succeeded", "succeeded"]);
    expect(stuck).toEqual([]);
    expect(await counterDrift(t.db, first.id)).toEqual({});
  });
});

describe("a worker whose passes keep failing", () => {
  it("stops heartbeating at once and calls onStuck after stuckAfterMs; once passes succeed it beats and works again", async () => {
    const owner = await makeOwner(t.db);
    await t.db.execute(sql.raw(`create or replace function refuse_claims() returns trigger language plpgsql as $$
      begin raise exception 'claims refused by the test'; end $$`));
    await t.db.execute(sql`create trigger refuse_claims before update on subagent_batch_items
      for each row when (new.status = 'leased') execute function refuse_claims()`);
    const stuck: number[] = [];
    const worker = new BatchWorker({
      database: t,
      config,
      instanceId: "w-stuck",
      runtime: createSubagentRuntime(config),
      model: resolveModel(config, {}),
      stuckAfterMs: 2_500,
      onStuck: (ms) => stuck.push(ms),
    });
    workers.push(worker);
    const beat = async () =>
      (await t.sql<{ at: number }[]>`select extract(epoch from last_heartbeat_at)::float8 as at from worker_heartbeats where id = 'w-stuck'`)[0]!.at;
    await worker.start();
    const batch = await submit(owner, ["waits for a working worker"]);
    await until("onStuck", async () => stuck.length > 0, 10_000);
    expect(stuck[0]).toBeGreaterThanOrEqual(2_500);
    // Heartbeats come every 2 s: none is written while the passes fail.
    const silent = await beat();
    await sleep(2_500);
    expect(await beat()).toBe(silent);
    expect(stuck).toHaveLength(1);

    await t.db.execute(sql`drop trigger refuse_claims on subagent_batch_items`);
    expect((await settledItems(batch.id)).map((r) => r.status)).toEqual(["succeeded"]);
    await until("a heartbeat again", async () => (await beat()) > silent, 5_000);
    expect(stuck).toHaveLength(1);
  });
});
