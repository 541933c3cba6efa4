import { sql } from "drizzle-orm";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { catalogEndpointKey, rateLimitSettingsFromConfig, SharedRateLimiter } from "@/server/runtime/rate-limit";
import { getBatch } from "@/server/batches/repository";
import { type LiveState, loadLiveStates } from "@/server/batches/waiting";
import { loadConfig } from "@/server/config/load";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { FakeAccount } from "../helpers/fake-rate-limits";
import { freePort, seedOwner, startWorkerProcess, stopAllWorkerProcesses, submit, waitForBatch, type WorkerProcess } from "./support";

/**
 * Limits learned from the provider's own headers, through real worker processes: a fake OpenAI
 * that enforces an account's limits as documented (fake-rate-limits.ts: a bucket of one
 * second's share, refilled continuously, rejected requests counted, x-ratelimit-* on every
 * answer, 429 with retry-after-ms), and a catalog entry that states no limit.
 */

const MODEL = "learned-model";
let t: TestDatabase;
let fake: FakeOpenAI | undefined;

beforeAll(async () => {
  t = await createTestDatabase();
});
afterEach(async () => {
  await stopAllWorkerProcesses();
  await fake?.close();
  fake = undefined;
});
afterAll(async () => {
  await stopAllWorkerProcesses();
  for (const key of ["MODEL_PROVIDER", "MODEL_BASE_URL", "MODEL_NAME", "MODEL_API_KEY"]) delete process.env[key];
});

const workerEnv = (url: string, extra: Record<string, string> = {}) => ({
  MODEL_PROVIDER: "openai",
  MODEL_BASE_URL: url,
  MODEL_API_KEY: "test-key",
  MODEL_NAME: MODEL,
  FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "12",
  ...extra,
});

async function startWorkers(n: number, env: Record<string, string>): Promise<WorkerProcess[]> {
  return Promise.all(Array.from({ length: n }, () => startWorkerProcess({ databaseUrl: t.url, env })));
}

async function endpointRow(url: string) {
  const [row] = (await t.db.execute(sql`
    select learned_requests_per_minute as rpm, share_requests as share, rate_limited::int as rate_limited, requests::int as requests
      from model_rate_limits where endpoint = ${catalogEndpointKey({ baseURL: url, model: MODEL })}`)) as unknown as {
    rpm: number | null;
    share: number;
    rate_limited: number;
    requests: number;
  }[];
  return row;
}

/** Items a second over the window between the first and the last admitted request. */
function admittedRate(f: FakeOpenAI, from = 0): number {
  const times = f.requests.slice(from).filter((r) => r.usage).map((r) => r.receivedAt);
  return (times.length - 1) / ((Math.max(...times) - Math.min(...times)) / 1000);
}

describe("limits learned from the provider's headers", () => {
  it("paces a batch at an unstated limit without a 429 storm, across two worker processes", { timeout: 120_000 }, async () => {
    const account = new FakeAccount({ requestsPerMinute: 600 }); // 10 a second, a bucket of 10
    fake = await startFakeOpenAI({ account, latencyMs: 200 });
    const port = await freePort([3251, 3252, 3253, 3254]);
    await Promise.all([
      startWorkerProcess({ databaseUrl: t.url, env: workerEnv(fake.url, { FLOTILLA__METRICS__WORKER_PORT: String(port) }) }),
      startWorkerProcess({ databaseUrl: t.url, env: workerEnv(fake.url) }),
    ]);
    const owner = await seedOwner(t.db);
    const ITEMS = 80;
    const batch = await submit(t.db, owner, Array.from({ length: ITEMS }, (_, i) => `item ${i}`), {
      maxRunning: 24,
      simulator: false,
      modelName: "default",
    });
    expect(await waitForBatch(t.db, batch.id, 90_000)).toMatchObject({ status: "completed", succeeded: ITEMS, failed: 0 });
    const rate = admittedRate(fake);
    console.info(`learned: ${account.accepted} accepted, ${account.rejected} rejected, ${rate.toFixed(2)}/s of 10/s`);
    // 24 slots at 200 ms would ask 120 a second; the limit is 10. Without learning, most asks are 429s.
    expect(account.rejected).toBeLessThanOrEqual(Math.ceil(account.accepted * 0.03));
    expect(rate).toBeGreaterThan(8);
    expect(rate).toBeLessThan(10.6);
    const row = await endpointRow(fake.url);
    expect(row?.rpm).toBe(600);
    // Operators see what was learned.
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const endpoint = catalogEndpointKey({ baseURL: fake.url, model: MODEL });
    expect(metrics).toContain(`flotilla_provider_limit{endpoint="${endpoint}",model="${MODEL}",kind="requests"} 600`);
  });

  it("gives way when another program drains the same key, from remaining and reset", { timeout: 120_000 }, async () => {
    const account = new FakeAccount({ requestsPerMinute: 600 });
    fake = await startFakeOpenAI({ account, latencyMs: 200 });
    await startWorkers(2, workerEnv(fake.url));
    const owner = await seedOwner(t.db);
    // The other program takes half the limit, paced, for the whole run.
    let otherRejected = 0;
    const other = setInterval(() => {
      if (!account.draw()) otherRejected++;
    }, 200);
    try {
      const ITEMS = 60;
      const batch = await submit(t.db, owner, Array.from({ length: ITEMS }, (_, i) => `shared ${i}`), {
        maxRunning: 24,
        simulator: false,
        modelName: "default",
      });
      const shares: number[] = [];
      const watch = setInterval(() => {
        void endpointRow(fake!.url).then((r) => r && shares.push(Number(r.share)));
      }, 250);
      const done = await waitForBatch(t.db, batch.id, 90_000);
      clearInterval(watch);
      expect(done).toMatchObject({ status: "completed", succeeded: ITEMS, failed: 0 });
      const ours = fake.requests.length;
      const rejectedOurs = account.rejected - otherRejected;
      console.info(`shared key: ours ${ours} asked, ${rejectedOurs} rejected; other program rejected ${otherRejected}; shares ${shares.map((s) => s.toFixed(2)).join(" ")}`);
      // The remaining count told every process to give way: the share fell below the whole limit.
      expect(Math.min(...shares)).toBeLessThan(0.9);
      expect(rejectedOurs).toBeLessThanOrEqual(Math.ceil(ours * 0.05));
    } finally {
      clearInterval(other);
    }
  });

  it("never lets broken headers stop calls or park the endpoint, and logs each once", { timeout: 120_000 }, async () => {
    fake = await startFakeOpenAI({
      latencyMs: 50,
      headers: {
        "x-ratelimit-limit-requests": "0",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-limit-tokens": "10",
        "x-ratelimit-remaining-tokens": "99999999",
        "x-ratelimit-reset-tokens": "8760h",
      },
    });
    const [worker] = await startWorkers(1, workerEnv(fake.url));
    const owner = await seedOwner(t.db);
    const ITEMS = 40;
    const started = Date.now();
    const batch = await submit(t.db, owner, Array.from({ length: ITEMS }, (_, i) => `broken ${i}`), {
      maxRunning: 12,
      simulator: false,
      modelName: "default",
    });
    expect(await waitForBatch(t.db, batch.id, 60_000)).toMatchObject({ status: "completed", succeeded: ITEMS });
    // 40 calls of 50 ms on 12 slots: a few seconds, nothing paced at "0" or "10 tokens a minute".
    expect(Date.now() - started).toBeLessThan(20_000);
    const row = await endpointRow(fake.url);
    expect(row?.rpm).toBeNull();
    const warnings = (worker?.output() ?? "").split("\n").filter((l) => l.includes("cannot trust"));
    expect(warnings.some((l) => l.includes("x-ratelimit-limit-requests"))).toBe(true);
    expect(warnings.some((l) => l.includes("x-ratelimit-remaining-tokens"))).toBe(true);
    // Once per header, not once per answer.
    expect(warnings.length).toBeLessThanOrEqual(3);
  });

  it("a chat call starts within the horizon while a batch's backlog waits on the limit", { timeout: 120_000 }, async () => {
    const account = new FakeAccount({ requestsPerMinute: 120 }); // 2 a second
    fake = await startFakeOpenAI({ account, latencyMs: 100 });
    const workers = await startWorkers(2, workerEnv(fake.url));
    const owner = await seedOwner(t.db);
    const batch = await submit(t.db, owner, Array.from({ length: 40 }, (_, i) => `backlog ${i}`), {
      maxRunning: 24,
      simulator: false,
      modelName: "default",
    });
    // Wait until the limit is learned and the batch's 24 slots all wait on it (12 s of backlog at 2/s).
    const endpoint = catalogEndpointKey({ baseURL: fake.url, model: MODEL });
    const deadline = Date.now() + 30_000;
    while (!(await endpointRow(fake.url))?.rpm || account.accepted < 6) {
      if (Date.now() > deadline) throw new Error("the batch never reached the limit");
      await new Promise((r) => setTimeout(r, 100));
    }
    // The lead's chat turn in another process (this one), on the same endpoint and schedule.
    const config = loadConfig({ env: {} });
    const chat = new SharedRateLimiter(rateLimitSettingsFromConfig(config, { learn: true }), () => t.db);
    const reservation = await chat.acquire(endpoint);
    console.info(`chat waited ${reservation.waitedMs.toFixed(0)} ms behind a batch backlog`);
    expect(reservation.counted).toBe(true);
    // At most the horizon (500 ms) and one interval (500 ms) ahead, not the backlog's seconds.
    expect(reservation.waitedMs).toBeLessThan(1_200);
    // The panel's view of the batch: waiting on the provider's limit, with a rate and an ETA.
    // (This process resolves the batch's "default" model from MODEL_* as the workers do.)
    Object.assign(process.env, { MODEL_PROVIDER: "openai", MODEL_BASE_URL: fake.url, MODEL_NAME: MODEL, MODEL_API_KEY: "test-key" });
    let live: LiveState | undefined;
    for (let i = 0; i < 50 && !(live?.waitingReason === "rate_limited" && live.eta); i++) {
      const row = await getBatch(t.db, { ...owner, batchId: batch.id });
      live = (await loadLiveStates(t.db, { batches: [row], leaseSeconds: 5 })).get(batch.id);
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(live?.waitingReason).toBe("rate_limited");
    expect(live?.eta?.items_per_minute).toBeGreaterThan(60);
    expect(live?.eta?.items_per_minute).toBeLessThan(160);
    const done = await waitForBatch(t.db, batch.id, 60_000).catch((err) => {
      for (const w of workers) console.error(w.output().slice(-4000));
      throw err;
    });
    expect(done).toMatchObject({ status: "completed", succeeded: 40 });
    expect(account.rejected).toBeLessThanOrEqual(2);
  });
});
