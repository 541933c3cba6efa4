import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { batchSubagent } from "@/server/agent/registry";
import { claimItems, recoverExpiredLeases, settleItems } from "@/server/batches/claim";
import { getItemDetail } from "@/server/batches/item-detail";
import { getBatch, retryItem } from "@/server/batches/repository";
import type { Settlement } from "@/server/batches/settlement";
import { loadSteps, saveStep } from "@/server/batches/steps";
import { submitBatch } from "@/server/batches/submit";
import { buildGroupTools } from "@/server/tools";
import { closeMcpClients, IDEMPOTENCY_META_KEY } from "@/server/tools/mcp";
import { stripDirectives, waitBeforeStep } from "@/server/models/simulator/directives";
import { createSubagentRuntime } from "@/server/runtime/admission";
import { BatchWorker } from "@/server/worker/loop";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeOwner, SIM_MODEL, sleep, testConfig } from "./support";

/**
 * Durable steps (DESIGN "Durable steps"): a real worker process SIGKILLed between two steps of an
 * item, the next attempt (another worker, after the lease expired) resumes without repeating the
 * first tool calls (one workspace write, one MCP call carrying its idempotency key); a late step
 * write from a worker that lost its lease does not land; replays under the same key are no-ops.
 */

let t: TestDatabase;
const children = new Set<ChildProcess>();
const dir = mkdtempSync(path.join(tmpdir(), "flotilla-steps-"));
const recorder = (log: string) => ({
  command: process.execPath,
  args: [path.resolve("test/fixtures/mcp-recorder.mjs"), log],
});
const recorded = (log: string): Array<{ args: unknown; meta: Record<string, unknown> | null }> =>
  existsSync(log)
    ? readFileSync(log, "utf8")
        .trim()
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    : [];

beforeAll(async () => {
  t = await createTestDatabase();
});

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await closeMcpClients();
});

function spawnWorker(env: Record<string, string>): ChildProcess {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")),
  );
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    cwd: process.cwd(),
    env: { ...base, DATABASE_URL: t.url, LOG_LEVEL: "warn", NODE_ENV: "production", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d) => {
    stderr += String(d);
    if (stderr.length > 20_000) stderr = stderr.slice(-10_000);
  });
  child.on("exit", (code, signal) => {
    children.delete(child);
    if (code !== 0 && signal === null) console.error(`worker exited with ${code}: ${stderr}`);
  });
  children.add(child);
  return child;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe("durable steps", () => {
  it("[[wait-after-step:N:MS]] waits before step N+1 only, and is no part of the answer", () => {
    const text = "Go [[wait-after-step:1:250]] on [[ wait-after-step : 3 : 40 ]]";
    expect([1, 2, 3, 4, 5].map((step) => waitBeforeStep(text, step))).toEqual([0, 250, 0, 40, 0]);
    expect(waitBeforeStep("[[wait-after-step:0:10]]", 1)).toBe(10);
    expect(waitBeforeStep("[[wait-after-step:x:10]] [[wait-after-step:1]]", 2)).toBe(0);
    expect(stripDirectives(text).replace(/\s+/g, " ").trim()).toBe("Go on");
  });

  it("a worker SIGKILLed between two steps: the next attempt resumes, no tool call runs twice", async () => {
    const log = path.join(dir, "killed.jsonl");
    const servers = { rec: recorder(log) };
    const config = testConfig({
      mcp: { servers },
      subagents: {
        definitions: [
          { name: "stepper", description: "Writes and records.", system_prompt: "Do the steps.", tool_groups: ["workspace", "mcp:rec"] },
        ],
      },
    });
    const owner = await makeOwner(t.db);
    const prompt =
      'Log it [[tool:write_file {"path":"notes/a.txt","content":"one"}]] [[tool:rec__record {"note":"first"}]] ' +
      "[[wait-after-step:2:5000]]";
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, "stepper"),
      ...owner,
      input: { submission_key: "killed", subagent: "stepper", items: [prompt] },
      config,
      model: SIM_MODEL,
    });
    const env = {
      FLOTILLA__MCP__SERVERS: JSON.stringify(servers),
      FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "2",
      FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
      FLOTILLA__SIMULATOR__LATENCY_MS: "10",
    };
    const first = spawnWorker(env);
    const [item] = await t.db.execute<{ id: string; item_key: string }>(
      sql`select id, item_key from subagent_batch_items where batch_id = ${batch.id}`,
    );
    // Both tool steps stored: the worker now waits 5 s before step 3. Kill it there.
    await until("two stored steps", async () => ((await loadSteps(t.db, item!.id)).length === 2 ? true : undefined), 60_000);
    first.kill("SIGKILL");
    await until("the first worker's exit", async () => (first.exitCode !== null || first.signalCode ? true : undefined), 10_000);
    expect(recorded(log)).toHaveLength(1);

    const second = spawnWorker(env);
    const done = await until(
      "the batch to finish",
      async () => {
        const b = await getBatch(t.db, { ...owner, batchId: batch.id });
        return ["completed", "failed"].includes(b.status) ? b : undefined;
      },
      90_000,
    );
    expect(done.status).toBe("completed");

    // The MCP server saw one call, with step 2's key; the workspace one write, under step 1's key
    // (generation 1 both: a resumed attempt is the same run of the item).
    const calls = recorded(log);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.meta).toEqual({ [IDEMPOTENCY_META_KEY]: `${batch.id}:${item!.item_key}:1:2:0` });
    const keys = await t.db.execute<{ idempotency_key: string; path: string }>(
      sql`select idempotency_key, path from workspace_write_keys where thread_id = ${owner.threadId}`,
    );
    expect(keys.map((k) => [k.idempotency_key, k.path])).toEqual([[`${batch.id}:${item!.item_key}:1:1:0`, "notes/a.txt"]]);

    const [row] = await t.db.execute<{ attempts: number; result: string }>(
      sql`select attempts, result from subagent_batch_items where id = ${item!.id}`,
    );
    expect(row!.attempts).toBe(2);
    // The answer reads both tool results, replayed from the stored steps.
    expect(row!.result).toContain("Ran 2 tool calls");
    expect(row!.result).toContain("recorded first");
    const detail = await getItemDetail(t.db, { ...owner, batchId: batch.id, itemId: item!.id });
    expect(detail.tool_call_list.map((c) => [c.name, c.status])).toEqual([
      ["write_file", "ok"],
      ["rec__record", "ok"],
    ]);
    // Finished: its steps are gone.
    expect(await loadSteps(t.db, item!.id)).toEqual([]);
    // The tests below claim by hand: no worker of this one may take their items.
    second.kill("SIGKILL");
    await until("the second worker's exit", async () => (second.exitCode !== null || second.signalCode ? true : undefined), 10_000);
  }, 180_000);

  it("a worker's shutdown between two steps: the item goes back with its steps and the next worker continues", async () => {
    const config = testConfig({
      simulator: { latency_ms: 10 },
      subagent_batches: { poll_interval_seconds: 0.05 },
      subagents: {
        definitions: [{ name: "counter", description: "Counts.", system_prompt: "Count.", tool_groups: ["text", "clock"] }],
      },
    });
    const owner = await makeOwner(t.db);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, "counter"),
      ...owner,
      input: {
        submission_key: "shutdown",
        subagent: "counter",
        items: ['Count [[tool:count_text {"text":"a b c"}]] [[tool:current_time]] [[wait-after-step:1:3000]]'],
      },
      config,
      model: SIM_MODEL,
    });
    const worker = (id: string) =>
      new BatchWorker({ database: t, config, instanceId: id, runtime: createSubagentRuntime(config), listen: false, heartbeat: false });
    const a = worker("shutdown-a");
    await a.start();
    const [item] = await t.db.execute<{ id: string }>(sql`select id from subagent_batch_items where batch_id = ${batch.id}`);
    const [step1] = await until("step 1 stored", async () => {
      const steps = await loadSteps(t.db, item!.id);
      return steps.length === 1 ? steps : undefined;
    }, 30_000);
    await a.stop();
    // Handed back with its attempt refunded: only the stored steps say where it was.
    const [back] = await t.db.execute<{ status: string; attempts: number }>(
      sql`select status, attempts from subagent_batch_items where id = ${item!.id}`,
    );
    expect(back).toEqual({ status: "queued", attempts: 0 });

    const b = worker("shutdown-b");
    await b.start();
    const done = await until("the batch to finish", async () => {
      const x = await getBatch(t.db, { ...owner, batchId: batch.id });
      return ["completed", "failed"].includes(x.status) ? x : undefined;
    }, 60_000);
    await b.stop();
    expect(done.status).toBe("completed");
    // The finished run holds step 1's very tool call (its id), not a second one: it was not run again.
    const detail = await getItemDetail(t.db, { ...owner, batchId: batch.id, itemId: item!.id });
    expect(detail.tool_call_list.map((c) => c.name)).toEqual(["count_text", "current_time"]);
    expect(detail.tool_call_list[0]!.id).toBe(step1!.toolCalls[0]!.id);
    expect(detail.attempts).toBe(1);
    expect(await loadSteps(t.db, item!.id)).toEqual([]);
  }, 120_000);

  it("a late step write from a worker that lost its lease does not land", async () => {
    const config = testConfig();
    const owner = await makeOwner(t.db);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "late", items: ["late write"] },
      config,
      model: SIM_MODEL,
    });
    const [a] = await claimItems(t.db, { workerId: "worker-a", limit: 1, leaseSeconds: 60 });
    expect(a!.batchId).toBe(batch.id);
    expect(a!.resume).toBe(false);
    const step = (n: number, text: string) => ({
      step: n,
      messages: [{ role: "assistant" as const, content: text }],
      toolCalls: [],
    });
    expect(await saveStep(t.db, { workerId: "worker-a", itemId: a!.id, leaseToken: a!.leaseToken, step: step(1, "a1") })).toBe(true);

    // A's lease expires and is recovered: its write is refused before anyone re-claims...
    await t.db.execute(sql`update subagent_batch_items set lease_expires_at = now() - interval '1 second' where id = ${a!.id}`);
    await recoverExpiredLeases(t.db);
    expect(await saveStep(t.db, { workerId: "worker-a", itemId: a!.id, leaseToken: a!.leaseToken, step: step(2, "a2") })).toBe(false);
    // ...and after B claimed (B is told to resume), whatever A sends.
    const [b] = await claimItems(t.db, { workerId: "worker-b", limit: 1, leaseSeconds: 60 });
    expect(b).toMatchObject({ id: a!.id, resume: true });
    expect(await saveStep(t.db, { workerId: "worker-a", itemId: a!.id, leaseToken: a!.leaseToken, step: step(2, "a2") })).toBe(false);
    expect(await saveStep(t.db, { workerId: "worker-a", itemId: a!.id, leaseToken: b!.leaseToken, step: step(2, "a2") })).toBe(false);
    expect(await saveStep(t.db, { workerId: "worker-b", itemId: b!.id, leaseToken: b!.leaseToken, step: step(2, "b2") })).toBe(true);
    const steps = await loadSteps(t.db, a!.id);
    expect(steps.map((s) => s.messages[0]!.content)).toEqual(["a1", "b2"]);
  });

  it("the generation: kept by a hand-back, a deferral and a lost lease (the run goes on), advanced by a start-over and a retry", async () => {
    const config = testConfig({ subagent_batches: { max_attempts: 5 } });
    const owner = await makeOwner(t.db);
    const { batch } = await submitBatch(t.db, {
      ...batchSubagent(config, undefined),
      ...owner,
      input: { submission_key: "generations", items: ["g"] },
      config,
      model: SIM_MODEL,
    });
    const worker = "gen-worker";
    const claim = async () => {
      const [c] = await claimItems(t.db, { workerId: worker, limit: 1, leaseSeconds: 60 });
      expect(c!.batchId).toBe(batch.id);
      return c!;
    };
    const settle = (settlement: Settlement) => settleItems(t.db, { workerId: worker, maxDeferrals: 5, settlements: [settlement] });
    const held = (x: { id: string; leaseToken: number }) => ({ id: x.id, leaseToken: x.leaseToken, steps: true });
    let c = await claim();
    expect(c.generation).toBe(1);
    await settle({ ...held(c), kind: "released" });
    c = await claim();
    await settle({ ...held(c), kind: "deferred", delayMs: 0, error: "rate limited" });
    c = await claim();
    await t.db.execute(sql`update subagent_batch_items set lease_expires_at = now() - interval '1 second' where id = ${c.id}`);
    await recoverExpiredLeases(t.db);
    c = await claim();
    expect(c.generation).toBe(1);
    // A retryable failure starts the item over: a new run, new keys.
    await settle({ ...held(c), kind: "failed", error: "model_error: boom" });
    c = await claim();
    expect(c.generation).toBe(2);
    await settle({ ...held(c), kind: "failed", error: "model_error: boom", retryable: false });
    await retryItem(t.db, { ...owner, batchId: batch.id, itemId: c.id, config });
    c = await claim();
    expect(c.generation).toBe(3);
  });

  it("a replayed workspace write and MCP call carry the same key; the write is a no-op", async () => {
    const log = path.join(dir, "replay.jsonl");
    const config = testConfig({ mcp: { servers: { rec: recorder(log) } } });
    const owner = await makeOwner(t.db);
    const ctx = (runId: string, key?: string) => ({
      db: t.db,
      config,
      userId: owner.userId,
      threadId: owner.threadId,
      runId,
      signal: new AbortController().signal,
      ...(key ? { idempotencyKey: () => key } : {}),
    });
    const call = { toolCallId: "c", messages: [] };
    const runs = await t.db.execute<{ id: string }>(
      sql`insert into agent_runs (user_id, thread_id, kind, definition, model, prompt, status)
          values (${owner.userId}, ${owner.threadId}, 'batch_item', 'general', 'simulator', 'p', 'running'),
                 (${owner.userId}, ${owner.threadId}, 'batch_item', 'general', 'simulator', 'p', 'running') returning id`,
    );
    const [run1, run2] = runs.map((r) => r.id);
    const first = await buildGroupTools(["workspace", "mcp:rec"], ctx(run1!, "b:k:1"));
    const again = await buildGroupTools(["workspace", "mcp:rec"], ctx(run2!, "b:k:1"));
    const w1 = await first.write_file!.execute!({ path: "r.txt", content: "first" }, call);
    const w2 = await again.write_file!.execute!({ path: "r.txt", content: "second" }, call);
    expect(w1).not.toHaveProperty("replayed");
    expect(w2).toMatchObject({ path: "r.txt", replayed: true, sha256: (w1 as { sha256: string }).sha256 });
    const [file] = await t.db.execute<{ bytes: Buffer; created_by_run_id: string }>(
      sql`select bytes, created_by_run_id from workspace_files where thread_id = ${owner.threadId} and path = 'r.txt'`,
    );
    expect(file!.bytes.toString()).toBe("first");
    expect(file!.created_by_run_id).toBe(run1);
    // Another step's key writes; a run without a key (chat, task) always writes.
    const next = await buildGroupTools(["workspace"], ctx(run2!, "b:k:2"));
    await next.write_file!.execute!({ path: "r.txt", content: "third" }, call);
    const plain = await buildGroupTools(["workspace", "mcp:rec"], ctx(run2!));
    await plain.write_file!.execute!({ path: "r.txt", content: "fourth" }, call);
    const [now] = await t.db.execute<{ bytes: Buffer }>(
      sql`select bytes from workspace_files where thread_id = ${owner.threadId} and path = 'r.txt'`,
    );
    expect(now!.bytes.toString()).toBe("fourth");

    // The MCP server gets the key on every call that has one (a replay included), none otherwise.
    await first.rec__record!.execute!({ note: "x" }, call);
    await again.rec__record!.execute!({ note: "x" }, call);
    await plain.rec__record!.execute!({ note: "y" }, call);
    expect(recorded(log).map((c) => c.meta)).toEqual([
      { [IDEMPOTENCY_META_KEY]: "b:k:1" },
      { [IDEMPOTENCY_META_KEY]: "b:k:1" },
      null,
    ]);
  }, 60_000);
});
