import { batchSubagent } from "@/server/agent/registry";
import { randomUUID } from "node:crypto";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import { sql } from "drizzle-orm";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import type { FlotillaConfig } from "@/lib/config";
import { checkPassRate } from "@/lib/api/model-facts";
import { createBatchResultsTool } from "@/server/agent/tools/batch";
import { cancelBatch, retryItem } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { claimWakeup, runOneWakeup, WAKEUP_MAX_ATTEMPTS } from "@/server/chat/wakeup";
import { resolveModel } from "@/server/models/index";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { SIM_MODEL, sleep, testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { call, getProjection, waitUntil, Workers } from "./support";

/**
 * Lead wake-up on settlement, with real worker processes and real web-runner processes racing:
 * one wake-up and one stored assistant message per settlement, a pending row that outlives a
 * killed web process, no wake-up for API batches or with wake_lead off, retries that re-settle
 * wake again, cancellation wakes with what finished, a failing model ends in a stored
 * could-not-summarize message, and batch_results reads only this thread's batches.
 */

const WORKER_ENV = { FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" };
const workers = new Workers();
let t: TestDatabase;
let user: TestUser;
const config = testConfig();

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  user = await makeUser(t, "wake");
});

// Every test starts the processes it needs and leaves nothing due: none of its processes, batches
// or wake-ups outlives it (a failure included). A wake-up left due, or leased to a killed runner
// for WAKEUP_LEASE_SECONDS, would be claimed by the next test's runOneWakeup, or hold the user's
// WAKEUP_PER_USER_LIMIT, so one failure used to time out every wake-up test after it.
afterEach(async () => {
  await workers.stopAll();
  const open = await t.db.execute<{ id: string; user_id: string; thread_id: string }>(
    sql`select id, user_id, thread_id from subagent_batches where status not in ('completed', 'failed', 'cancelled')`,
  );
  for (const b of open) await cancelBatch(t.db, { userId: b.user_id, threadId: b.thread_id, batchId: b.id });
  await t.db.execute(sql`update batch_wakeups set done_at = now(), lease_expires_at = null where done_at is null`);
});

async function leadBatch(threadId: string, items: string[], cfg: FlotillaConfig = config, extra: Record<string, unknown> = {}) {
  const runId = randomUUID();
  const { batch } = await submitBatch(t.db, { ...batchSubagent(cfg, undefined),
    userId: user.userId,
    threadId,
    input: { submission_key: `${runId}:call-1`, items, max_running_items: 4, ...extra },
    config: cfg,
    model: SIM_MODEL,
    origin: { kind: "tool", runId, toolCallId: "call-1" },
  });
  return batch;
}

async function wakeMessages(threadId: string) {
  return t.db.execute<{ id: string; metadata: { trigger?: string; batch_id?: string }; text: string }>(sql`
    select id, metadata, (select string_agg(p->>'text', '') from jsonb_array_elements(parts) p) as text from messages
     where thread_id = ${threadId} and role = 'assistant' and metadata->>'trigger' = 'batch_settled'
     order by created_at`);
}

async function wakeRows(batchId: string) {
  return t.db.execute<{
    settlement_seq: number;
    settled_status: string;
    attempts: number;
    done_at: Date | null;
    claimed_by: string | null;
    message_id: string | null;
    last_error: string | null;
  }>(sql`
    select settlement_seq, settled_status, attempts, done_at, claimed_by, message_id, last_error from batch_wakeups
     where batch_id = ${batchId} order by settlement_seq`);
}

const settledStatus = async (threadId: string, batchId: string) =>
  waitUntil(
    "batch settled",
    async () => {
      const p = await getProjection(user.token, threadId, batchId);
      return ["completed", "failed", "cancelled"].includes(p.status) ? p : undefined;
    },
    60_000,
  );

describe("wake-up on settlement", () => {
  it("wakes the lead exactly once per settlement with two web runners and two workers racing, and again after a retry re-settles", async () => {
    const runners = [workers.spawnWebRunner("web-a"), workers.spawnWebRunner("web-b")];
    workers.spawn(WORKER_ENV);
    workers.spawn(WORKER_ENV);
    await workers.waitAlive(2);
    const threads = await Promise.all(Array.from({ length: 4 }, () => makeThread(t, user)));
    const batches = await Promise.all(
      threads.map((threadId, i) =>
        leadBatch(threadId, [...Array.from({ length: 12 }, (_, j) => `b${i} item ${j} [[sleep:${20 + j * 5}]]`), `b${i} broken [[fail]]`]),
      ),
    );
    for (const [i, b] of batches.entries()) {
      const p = await settledStatus(threads[i]!, b.id);
      expect(p.status).toBe("completed");
      expect(p.counts).toMatchObject({ succeeded: 12, failed: 1 });
    }
    for (const [i, b] of batches.entries()) {
      await waitUntil("wake-up done", async () => ((await wakeRows(b.id))[0]?.done_at ? true : undefined), 60_000);
      const rows = await wakeRows(b.id);
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ settlement_seq: 1, settled_status: "completed", attempts: 1, last_error: null });
      expect(["web-a", "web-b"]).toContain(rows[0]!.claimed_by);
      const msgs = await wakeMessages(threads[i]!);
      expect(msgs).toHaveLength(1);
      expect(msgs[0]!.metadata).toMatchObject({ trigger: "batch_settled", batch_id: b.id });
      expect(msgs[0]!.id).toBe(rows[0]!.message_id);
      // The simulator's lead reports like an assistant: counts, the failing reason, where the results are.
      const text = msgs[0]!.text;
      expect(text).not.toMatch(/Automatic notice|Simulated answer|Durable batch/);
      expect(text).toContain(`Batch ${b.id.slice(0, 8)} finished: 12 of 13 items succeeded, 1 failed.`);
      expect(text).toMatch(/- 1 item \(item-13\): Simulated model failure/);
      expect(text).toContain(`[results.jsonl](/api/threads/${threads[i]}/subagent-batches/${b.id}/results.jsonl)`);
    }
    // The lead's run saw the bounded summary, failures grouped by error.
    const [run] = await t.db.execute<{ prompt: string }>(
      sql`select prompt from agent_runs where thread_id = ${threads[0]!} and kind = 'lead' order by created_at limit 1`,
    );
    expect(run!.prompt).toContain(`Durable batch ${batches[0]!.id}`);
    expect(run!.prompt).toContain("12 succeeded, 1 failed, 0 cancelled");
    expect(run!.prompt).toMatch(/First failures by error:\n- 1 × .+ \(e\.g\. item-13\)/);

    // A retried item re-opens the batch; its settlement wakes the lead a second time.
    const [failed] = await t.db.execute<{ id: string }>(
      sql`select id from subagent_batch_items where batch_id = ${batches[0]!.id} and status = 'failed'`,
    );
    await retryItem(t.db, { userId: user.userId, threadId: threads[0]!, batchId: batches[0]!.id, itemId: failed!.id, config });
    await waitUntil("second wake-up done", async () => ((await wakeRows(batches[0]!.id))[1]?.done_at ? true : undefined), 60_000);
    const again = await wakeRows(batches[0]!.id);
    expect(again.map((r) => r.settlement_seq)).toEqual([1, 2]);
    const both = await wakeMessages(threads[0]!);
    expect(both).toHaveLength(2);
    // The retried item fails again ([[fail]] always does): the second report says so, once.
    expect(both[1]!.text).toContain(`Batch ${batches[0]!.id.slice(0, 8)} finished again after the retry: 12 of 13 items succeeded, 1 failed.`);
    expect(both[1]!.text).not.toMatch(/Automatic notice|Simulated answer/);
    await workers.stopAll();
    expect(runners.map((r) => r.exitCode)).toEqual([0, 0]);
  }, 180_000);

  it("hands each due wake-up to exactly one of many concurrent claimers", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      // One thread each: a thread's wake-ups run one at a time.
      const threadId = await makeThread(t, user);
      const b = await leadBatch(threadId, ["x"]);
      await cancelBatch(t.db, { userId: user.userId, threadId, batchId: b.id });
      ids.push(b.id);
    }
    // A claim locks the user's due rows while it takes one, so a claimer that overlaps it gets
    // nothing this round (it tries again at its next tick): race rounds of 20 until all are taken.
    const won: string[] = [];
    for (let round = 0; won.length < ids.length && round < 20; round++) {
      const claims = await Promise.all(Array.from({ length: 20 }, (_, i) => claimWakeup(t.db, `claimer-${round}-${i}`, { perUser: 20 })));
      won.push(...claims.filter((c) => c !== undefined).map((c) => c!.batch_id));
    }
    expect(won.sort()).toEqual([...ids].sort());
    const rows = await t.db.execute<{ attempts: number }>(sql`select attempts from batch_wakeups where batch_id in ${sql.raw(`('${ids.join("','")}')`)}`);
    expect(rows.map((r) => r.attempts)).toEqual([1, 1, 1, 1, 1]);
    // Leased: nobody else gets them until the lease expires.
    expect(await claimWakeup(t.db, "late", { perUser: 20 })).toBeUndefined();
    await t.db.execute(sql`delete from batch_wakeups where batch_id in ${sql.raw(`('${ids.join("','")}')`)}`);
  });

  it("runs one wake-up per thread at a time: a second claim skips a thread whose wake-up is leased", async () => {
    const threadId = await makeThread(t, user);
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const b = await leadBatch(threadId, ["x"]);
      await cancelBatch(t.db, { userId: user.userId, threadId, batchId: b.id });
      ids.push(b.id);
    }
    const first = await claimWakeup(t.db, "one", { perUser: 20 });
    expect(first?.batch_id).toBe(ids[0]);
    expect(await claimWakeup(t.db, "two", { perUser: 20 })).toBeUndefined();
    await t.db.execute(sql`delete from batch_wakeups where thread_id = ${threadId}`);
  });

  it("keeps the pending wake-up while no web process is up, and the next web process runs it once", async () => {
    const threadId = await makeThread(t, user);
    const web = workers.spawnWebRunner("web-doomed");
    workers.spawn(WORKER_ENV);
    await workers.waitAlive(1);
    const batch = await leadBatch(threadId, Array.from({ length: 6 }, (_, j) => `slow ${j} [[sleep:400]]`));
    await sleep(300);
    await workers.killAll([web]); // the web process dies while the batch runs
    await settledStatus(threadId, batch.id);
    await sleep(500);
    const waiting = await wakeRows(batch.id);
    expect(waiting).toHaveLength(1);
    expect(waiting[0]!.done_at).toBeNull();
    expect(await wakeMessages(threadId)).toHaveLength(0);

    workers.spawnWebRunner("web-restarted");
    await waitUntil("wake-up after restart", async () => ((await wakeRows(batch.id))[0]?.done_at ? true : undefined), 60_000);
    expect((await wakeRows(batch.id))[0]).toMatchObject({ claimed_by: "web-restarted", attempts: 1 });
    expect(await wakeMessages(threadId)).toHaveLength(1);
  }, 120_000);

  it("never wakes for API batches or with subagent_batches.wake_lead off; cancellation wakes with what finished", async () => {
    workers.spawnWebRunner("web-c");
    workers.spawn(WORKER_ENV);
    await workers.waitAlive(1);
    const threadId = await makeThread(t, user);
    const api = await call("POST", `/api/threads/${threadId}/subagent-batches`, {
      token: user.token,
      json: { submission_key: "api-batch", items: ["api one [[sleep:10]]", "api two [[sleep:10]]"] },
    });
    expect(api.status).toBe(201);
    const apiId = ((await api.json()) as { id: string }).id;
    const off = await leadBatch(threadId, ["quiet [[sleep:10]]"], testConfig({ subagent_batches: { wake_lead: false } }));
    const cancelled = await leadBatch(threadId, [
      "quick 1 [[sleep:10]]",
      "quick 2 [[sleep:10]]",
      ...Array.from({ length: 10 }, (_, j) => `long ${j} [[sleep:20000]]`),
    ]);
    await settledStatus(threadId, apiId);
    await settledStatus(threadId, off.id);
    await waitUntil("two quick items done", async () => {
      const p = await getProjection(user.token, threadId, cancelled.id);
      return p.counts.succeeded >= 2 ? true : undefined;
    });
    await cancelBatch(t.db, { userId: user.userId, threadId, batchId: cancelled.id });
    await waitUntil("cancel wake-up", async () => ((await wakeRows(cancelled.id))[0]?.done_at ? true : undefined), 60_000);
    expect((await wakeRows(cancelled.id))[0]!.settled_status).toBe("cancelled");
    const [run] = await t.db.execute<{ prompt: string }>(sql`
      select prompt from agent_runs where thread_id = ${threadId} and kind = 'lead' and prompt like ${`%${cancelled.id}%`}`);
    expect(run!.prompt).toMatch(/2 succeeded, 0 failed, 10 cancelled/);
    await sleep(1_000); // a runner polling every 50 ms had every chance to (wrongly) wake the others
    expect(await wakeRows(apiId)).toHaveLength(0);
    expect(await wakeRows(off.id)).toHaveLength(0);
    const msgs = await wakeMessages(threadId);
    expect(msgs.map((m) => m.metadata.batch_id)).toEqual([cancelled.id]);
    expect(msgs[0]!.text).toContain(
      `Batch ${cancelled.id.slice(0, 8)} was cancelled: 2 of 12 items had succeeded before it stopped, 10 cancelled.`,
    );
    expect(msgs[0]!.text).not.toMatch(/Automatic notice|Simulated answer/);
  }, 120_000);

  it("retries a failing model with backoff, then stores a could-not-summarize message once", async () => {
    const threadId = await makeThread(t, user);
    const batch = await leadBatch(threadId, ["x"]);
    // Settle it without a worker: the trigger inserts the wake-up row like any settlement.
    await cancelBatch(t.db, { userId: user.userId, threadId, batchId: batch.id });
    const sim = resolveModel(config, {});
    const broken: LanguageModelV3 = {
      ...sim.model,
      doGenerate: () => Promise.reject(new Error("provider is down")),
      doStream: () => Promise.reject(new Error("provider is down")),
    } as LanguageModelV3;
    const model = { ...sim, model: broken };
    for (let i = 1; i <= WAKEUP_MAX_ATTEMPTS; i++) {
      await waitUntil(`attempt ${i} due`, async () => ((await runOneWakeup({ db: t.db, config, owner: "in-test", model, backoffBaseMs: 50 })) ? true : undefined), 5_000, 20);
      const [row] = await wakeRows(batch.id);
      expect(row!.attempts).toBe(i);
      expect(row!.done_at === null).toBe(i < WAKEUP_MAX_ATTEMPTS);
    }
    const msgs = await wakeMessages(threadId);
    expect(msgs).toHaveLength(1);
    expect(msgs[0]!.text).toMatch(/could not produce a summary of it: .*provider is down/);
    expect(await runOneWakeup({ db: t.db, config, owner: "in-test", model, backoffBaseMs: 50 })).toBe(false);
  }, 60_000);
});

describe("wake-up after a pilot", () => {
  it("wakes the lead once when the batch pauses after its pilot, with how the pilot went, and again when the rest settles", async () => {
    workers.spawn(WORKER_ENV);
    await workers.waitAlive(1);
    const threadId = await makeThread(t, user);
    const items = ["p1 [[sleep:10]]", "p2 [[fail]]", "p3 [[sleep:10]]", "p4 [[sleep:10]]", "p5 [[sleep:10]]"];
    const batch = await leadBatch(threadId, items, config, { pilot: 3 });
    const wake = (what: string) =>
      waitUntil(what, async () => ((await runOneWakeup({ db: t.db, config, owner: "in-test" })) ? true : undefined), 60_000, 50);
    await wake("the pilot's wake-up");
    const paused = await getProjection(user.token, threadId, batch.id);
    expect(paused).toMatchObject({ status: "paused", pause_reason: "pilot", counts: { succeeded: 2, failed: 1 } });
    expect(await wakeRows(batch.id)).toMatchObject([{ settlement_seq: 0, settled_status: "paused", attempts: 1, last_error: null }]);
    const [pilot] = await wakeMessages(threadId);
    expect(pilot!.metadata).toMatchObject({ trigger: "batch_settled", batch_id: batch.id });
    const short = batch.id.slice(0, 8);
    expect(pilot!.text).toContain(`Batch ${short} paused after its pilot: 2 of its first 3 items succeeded, 1 failed.`);
    expect(pilot!.text).toMatch(/- 1 item \(item-2\): Simulated model failure/);
    expect(pilot!.text).toContain("resume the batch there to run the other 2 items.");
    // The rest projected from the pilot's real usage (the simulator is free).
    expect(pilot!.text).toContain("Projected from the pilot: $0.0000 for all 5 items ($0.0000 an item).");
    expect(pilot!.text).not.toMatch(/Automatic notice|finished/);
    const [run] = await t.db.execute<{ prompt: string }>(sql`
      select prompt from agent_runs where thread_id = ${threadId} and kind = 'lead' order by created_at limit 1`);
    expect(run!.prompt).toContain(`Durable batch ${batch.id} (sub-agent general) paused after its pilot: its first 3 items ran, and the other 2 wait`);
    expect(run!.prompt).toContain("Projected from the pilot: $0.0000 for all 5 items ($0.0000 an item). Tell the user this projection");
    // Nothing more to wake for while it waits for the person.
    expect(await runOneWakeup({ db: t.db, config, owner: "in-test" })).toBe(false);

    // Resumed, the rest runs and the settlement wakes the lead as any settlement does.
    const resumed = await call("POST", `/api/threads/${threadId}/subagent-batches/${batch.id}/resume`, { token: user.token });
    expect(resumed.status).toBe(200);
    await settledStatus(threadId, batch.id);
    await wake("the settlement's wake-up");
    expect((await wakeRows(batch.id)).map((r) => [r.settlement_seq, r.settled_status])).toEqual([
      [0, "paused"],
      [1, "completed"],
    ]);
    const msgs = await wakeMessages(threadId);
    expect(msgs).toHaveLength(2);
    expect(msgs[1]!.text).toContain(`Batch ${short} finished: 4 of 5 items succeeded, 1 failed.`);
  }, 120_000);
});

describe("wake-up of a batch with checks", () => {
  it("gives the pass rate per check and the first failing reasons, and the simulator's reply repeats those lines", async () => {
    workers.spawn(WORKER_ENV);
    await workers.waitAlive(1);
    const threadId = await makeThread(t, user);
    const batch = await leadBatch(threadId, ["one", "two", "three", "four", "five", "six"]);
    const p = await settledStatus(threadId, batch.id);
    expect(p.status).toBe("completed");
    await workers.stopAll(); // no web runner: the wake-up waits for this test to run it
    // Checks with long reasons, set with SQL (the counters trigger keeps the verdict and per-check counts).
    await t.db.execute(sql`
      update subagent_batches
         set execution_spec = jsonb_set(execution_spec, '{checks}', ${JSON.stringify([
           { name: "label_matches", type: "equals", path: "/label" },
           { name: "is_short", type: "regex", pattern: "^.{0,80}$" },
           { name: "never_ran", type: "judge", rubric: "r" },
         ])}::jsonb)
       where id = ${batch.id}`);
    const checked = (reason?: string) =>
      JSON.stringify([
        reason ? { name: "label_matches", passed: false, reason } : { name: "label_matches", passed: true },
        { name: "is_short", passed: true },
      ]);
    await t.db.execute(sql`
      update subagent_batch_items
         set verdict = case when position in (2, 5) then 'failed' else 'passed' end,
             checks = case position
               when 2 then ${checked('expected "spam",\n  got "ham"')}::jsonb
               when 5 then ${checked(`expected "ham", got ${"x".repeat(500)}`)}::jsonb
               else ${checked()}::jsonb end
       where batch_id = ${batch.id}`);

    expect(await runOneWakeup({ db: t.db, config, owner: "in-test" })).toBe(true);
    const [run] = await t.db.execute<{ prompt: string }>(
      sql`select prompt from agent_runs where thread_id = ${threadId} and kind = 'lead' order by created_at limit 1`,
    );
    expect(run!.prompt).toContain("Checks: 4 items passed every check, 2 failed at least one. Pass rate per check:");
    expect(run!.prompt).toContain("- label_matches: 4 of 6 passed (67%)\n- is_short: 6 of 6 passed (100%)\n");
    expect(run!.prompt).toContain("- never_ran: 0 of 0 passed (no finished answers)");
    expect(run!.prompt).toContain('First items that failed a check:\n- item-2: label_matches: expected "spam", got "ham"\n');
    // A long reason is cut: the summary stays bounded however long the checks' reasons are.
    expect(run!.prompt).toMatch(/- item-5: label_matches: expected "ham", got x{150,190}\n/);

    const [msg] = await wakeMessages(threadId);
    expect(msg!.text).toContain(`Batch ${batch.id.slice(0, 8)} finished: all 6 items succeeded.`);
    expect(msg!.text).toContain("label_matches: 4 of 6 passed (67%)");
    expect(msg!.text).toContain("is_short: 6 of 6 passed (100%)");
    expect(msg!.text).toContain('item-2: label_matches: expected "spam", got "ham"');
    expect(msg!.text).not.toMatch(/Automatic notice|Simulated answer/);
  }, 120_000);

  it("with a real worker running the checks: the summary's pass rates and reasons, repeated by the simulator", async () => {
    workers.spawn(WORKER_ENV);
    await workers.waitAlive(1);
    const threadId = await makeThread(t, user);
    // The simulator answers a schema's first enum value ("spam"): the ham message fails label_matches;
    // its judge fails the item whose prompt holds [[judge-fail]].
    const batch = await leadBatch(
      threadId,
      [
        { text: "WIN A FREE CRUISE", expected: "spam" },
        { text: "Cheap pills [[judge-fail]]", expected: "spam" },
        { text: "Lunch at noon?", expected: "ham" },
        { text: "You won a prize", expected: "spam" },
      ] as unknown as string[],
      config,
      {
        prompt_template: "Classify this message as spam or ham: {{text}}",
        output_schema: {
          type: "object",
          properties: { label: { enum: ["spam", "ham"] }, reason: { type: "string" } },
          required: ["label", "reason"],
        },
        checks: [
          { name: "label_matches", type: "equals", path: "/label", expected_path: "" },
          { name: "polite", type: "judge", rubric: "The reason is polite." },
        ],
      },
    );
    const p = await settledStatus(threadId, batch.id);
    expect(p.status).toBe("completed");
    await workers.stopAll();
    expect(await runOneWakeup({ db: t.db, config, owner: "in-test" })).toBe(true);
    const [run] = await t.db.execute<{ prompt: string }>(
      sql`select prompt from agent_runs where thread_id = ${threadId} and kind = 'lead' order by created_at limit 1`,
    );
    expect(run!.prompt).toContain("Checks: 2 items passed every check, 2 failed at least one. Pass rate per check:");
    expect(run!.prompt).toContain("- label_matches: 3 of 4 passed (75%)\n- polite: 3 of 4 passed (75%)\n");
    expect(run!.prompt).toMatch(/First items that failed a check:\n- item-2: polite: .+\n- item-3: label_matches: .+\n/);
    const [msg] = await wakeMessages(threadId);
    expect(msg!.text).toContain("label_matches: 3 of 4 passed (75%)");
    expect(msg!.text).toContain("polite: 3 of 4 passed (75%)");
    expect(msg!.text).toMatch(/item-3: label_matches: /);
  }, 120_000);

  it("rounds a pass rate to neither 0% nor 100% unless it is exactly that", () => {
    expect(checkPassRate({ name: "label_matches", passed: 3, failed: 1 })).toBe("label_matches: 3 of 4 passed (75%)");
    expect(checkPassRate({ name: "a", passed: 1, failed: 999 })).toBe("a: 1 of 1000 passed (1%)");
    expect(checkPassRate({ name: "a", passed: 599, failed: 1 })).toBe("a: 599 of 600 passed (99%)");
    expect(checkPassRate({ name: "a", passed: 0, failed: 5 })).toBe("a: 0 of 5 passed (0%)");
    expect(checkPassRate({ name: "a", passed: 5, failed: 0 })).toBe("a: 5 of 5 passed (100%)");
  });
});

describe("batch_results", () => {
  it("reads bounded pages of this thread's batch and answers not found for another thread's", async () => {
    const mine = await makeThread(t, user);
    const other = await makeThread(t, user);
    const batch = await leadBatch(mine, ["r1", "r2", "r3"]);
    await t.db.execute(sql`
      update subagent_batch_items set status = 'succeeded', result = 'answer ' || position, preview = 'answer ' || position,
             finished_at = now() where batch_id = ${batch.id}`);
    const ctx = (threadId: string) => ({
      db: t.db,
      config,
      userId: user.userId,
      threadId,
      runId: randomUUID(),
      model: resolveModel(config, {}),
      abortSignal: new AbortController().signal,
    });
    const run = (threadId: string, input: Record<string, unknown>) =>
      // biome-ignore lint/suspicious/noExplicitAny: tool execute signatures are generic over their schemas
      (createBatchResultsTool(ctx(threadId)).execute as any)(input, { toolCallId: "c", messages: [], abortSignal: new AbortController().signal });
    const first = await run(mine, { batch_id: batch.id, limit: 2 });
    expect(first.items.map((i: { item_key: string; result: string }) => [i.item_key, i.result])).toEqual([
      ["item-1", "answer 1"],
      ["item-2", "answer 2"],
    ]);
    expect(first.next_cursor).toBeTruthy();
    const second = await run(mine, { batch_id: batch.id, limit: 2, cursor: first.next_cursor });
    expect(second.items.map((i: { item_key: string }) => i.item_key)).toEqual(["item-3"]);
    expect(second.next_cursor).toBeNull();
    expect(await run(other, { batch_id: batch.id })).toEqual({ error: "batch not found" });
    const stranger = await makeUser(t, "stranger");
    const strangerThread = await makeThread(t, stranger);
    expect(
      // biome-ignore lint/suspicious/noExplicitAny: as above
      await (createBatchResultsTool({ ...ctx(strangerThread), userId: stranger.userId }).execute as any)(
        { batch_id: batch.id },
        { toolCallId: "c", messages: [], abortSignal: new AbortController().signal },
      ),
    ).toEqual({ error: "batch not found" });
  });

  it("returns each item's output, verdict and checks, bounded, and reads only failed verdicts when asked", async () => {
    const threadId = await makeThread(t, user);
    const batch = await leadBatch(threadId, ["t1", "t2", "t3"]);
    const huge = { label: "spam", note: "n".repeat(50_000) };
    const longReason = `expected "ham" ${"r".repeat(10_000)}`;
    await t.db.execute(sql`
      update subagent_batch_items set status = 'succeeded', finished_at = now(),
             result = case position when 3 then ${JSON.stringify(huge)} else '{"label":"ham"}' end,
             preview = case position when 3 then left(${JSON.stringify(huge)}, 500) else '{"label":"ham"}' end,
             output = case position when 3 then ${JSON.stringify(huge)}::jsonb else '{"label":"ham"}'::jsonb end,
             verdict = case position when 1 then 'passed' else 'failed' end,
             checks = case position
               when 1 then '[{"name":"label_matches","passed":true},{"name":"tone","passed":true,"score":0.9,"reason":"fine"}]'::jsonb
               else ${JSON.stringify([
                 { name: "label_matches", passed: false, reason: longReason },
                 { name: "tone", passed: true, score: 1, reason: "fine" },
               ])}::jsonb end
       where batch_id = ${batch.id}`);
    const ctx = {
      db: t.db,
      config,
      userId: user.userId,
      threadId,
      runId: randomUUID(),
      model: resolveModel(config, {}),
      abortSignal: new AbortController().signal,
    };
    const run = (input: Record<string, unknown>) =>
      // biome-ignore lint/suspicious/noExplicitAny: tool execute signatures are generic over their schemas
      (createBatchResultsTool(ctx).execute as any)(input, { toolCallId: "c", messages: [], abortSignal: new AbortController().signal });
    const all = await run({ batch_id: batch.id });
    expect(all.items[0]).toEqual({
      item_key: "item-1",
      position: 1,
      status: "succeeded",
      attempts: 0,
      output: { label: "ham" },
      verdict: "passed",
      checks: [
        { name: "label_matches", passed: true },
        { name: "tone", passed: true, score: 0.9 },
      ],
      error: null,
    });
    const [, second, third] = all.items;
    expect(second.verdict).toBe("failed");
    expect(second.checks[0].name).toBe("label_matches");
    expect(second.checks[0].passed).toBe(false);
    expect(second.checks[0].reason.startsWith('expected "ham" rrr')).toBe(true);
    expect(second.checks[0].reason.length).toBeLessThan(2_000);
    // Too large for the page: no output, the preview instead, cut.
    expect(third.output).toBeNull();
    expect(third.result.startsWith('{"label":"spam"')).toBe(true);
    expect(JSON.stringify(all).length).toBeLessThan(config.tools.max_output_chars + 1_000);

    const failed = await run({ batch_id: batch.id, verdict: "failed" });
    expect(failed.items.map((i: { item_key: string }) => i.item_key)).toEqual(["item-2", "item-3"]);
  });
});
