import { sql } from "drizzle-orm";
import { catalogEndpointKey } from "@/server/runtime/rate-limit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeOpenAI, rateLimitReply, startFakeOpenAI } from "../helpers/fake-openai";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { seedOwner, startWorkerProcess, stopAllWorkerProcesses, submit, waitForBatch } from "./support";

/**
 * A 429 storm: for the first STORM_MS after its first request the fake provider answers every
 * call with 429 and retry-after: 2. Two real worker processes run a batch whose items have a
 * single attempt each (max_attempts 1), so one consumed attempt would fail an item. Every item
 * must still succeed — rate-limited items are deferred, not failed — and each 429 must hold back
 * the whole endpoint, in both processes, for its retry-after.
 */

const ITEMS = 8;
const STORM_MS = 9_000;
// Long enough that a request reserved just before a 429 (and delayed by a loaded event loop)
// lands well before the quiet window checked below.
const RETRY_AFTER_S = 2;

let t: TestDatabase;
let fake: FakeOpenAI;
let armed = false;
let stormStart = 0;
const answered429: number[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  fake = await startFakeOpenAI({
    handler: (req) => {
      if (!armed) return { type: "text", text: "warm-up", chunkDelayMs: 0 };
      stormStart ||= req.receivedAt;
      if (req.receivedAt - stormStart < STORM_MS) {
        answered429.push(req.receivedAt);
        return rateLimitReply({ "retry-after": String(RETRY_AFTER_S) });
      }
      return { type: "text", text: "calm again", chunkDelayMs: 0 };
    },
  });
});
afterAll(async () => {
  await stopAllWorkerProcesses();
  await fake?.close();
});

describe("provider 429 storm", () => {
  it("defers items without consuming attempts and slows the endpoint for every process", { timeout: 120_000 }, async () => {
    const env = {
      MODEL_BASE_URL: fake.url,
      MODEL_API_KEY: "test-key",
      MODEL_NAME: "storm-model",
      // A generous budget: the limiter only spaces calls 10 ms apart, so any quiet period seen
      // below comes from the recorded retry-after, not from the budget.
      FLOTILLA__RATE_LIMITS__REQUESTS_PER_MINUTE: "6000",
      FLOTILLA__RATE_LIMITS__MAX_DEFERRALS: "20",
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4",
    };
    await Promise.all([startWorkerProcess({ databaseUrl: t.url, env }), startWorkerProcess({ databaseUrl: t.url, env })]);
    const owner = await seedOwner(t.db);
    // Warm both processes up first (each can hold only half of these), so that a cold first
    // HTTP request does not blur the timing below.
    const warm = await submit(t.db, owner, Array.from({ length: ITEMS }, (_, i) => `warm ${i}`), {
      maxRunning: 8,
      simulator: false,
      modelName: "default",
    });
    expect(await waitForBatch(t.db, warm.id, 60_000)).toMatchObject({ succeeded: ITEMS });
    const warmRequests = fake.requests.length;
    armed = true;
    const batch = await submit(
      t.db,
      owner,
      Array.from({ length: ITEMS }, (_, i) => `storm item ${i + 1}`),
      { maxRunning: 8, simulator: false, modelName: "default", env: { FLOTILLA__SUBAGENT_BATCHES__MAX_ATTEMPTS: "1" } },
    );
    const done = await waitForBatch(t.db, batch.id, 90_000);
    expect(done).toMatchObject({ status: "completed", succeeded: ITEMS, failed: 0 });

    const items = (await t.db.execute(
      sql`select attempts, deferrals, status from subagent_batch_items where batch_id = ${batch.id} order by position`,
    )) as unknown as { attempts: number; deferrals: number; status: string }[];
    // Every item ended on its first and only attempt although it was rate-limited on the way.
    for (const it of items) expect(it).toMatchObject({ status: "succeeded", attempts: 1 });
    const deferrals = items.reduce((n, it) => n + it.deferrals, 0);
    console.info(`429 storm: ${answered429.length} answers, deferrals per item ${items.map((i) => i.deferrals).join(",")}`);
    // The storm outlasts the AI SDK's own retries (3 tries ≈ 2 × retry-after), so items had to be deferred.
    expect(items.filter((it) => it.deferrals > 0).length).toBeGreaterThanOrEqual(ITEMS / 2);
    const history = (await t.db.execute(
      sql`select outcome, count(*)::int as n from subagent_batch_item_attempts where batch_id = ${batch.id} group by outcome`,
    )) as unknown as { outcome: string; n: number }[];
    const byOutcome = Object.fromEntries(history.map((h) => [h.outcome, h.n]));
    expect(byOutcome.deferred).toBe(deferrals);
    expect(byOutcome.succeeded).toBe(ITEMS);
    expect(byOutcome.failed ?? 0).toBe(0);

    // Endpoint-wide slow-down: after each 429 the provider hears nothing from either process
    // until its retry-after is nearly over (reservations made just before the 429 may still land
    // in the first several hundred ms on a loaded machine).
    expect(answered429.length).toBeGreaterThan(0);
    const times = fake.requests.slice(warmRequests).map((r) => r.receivedAt);
    const quietFrom = 800;
    const quietTo = RETRY_AFTER_S * 1000 - 200;
    for (const at of answered429) {
      const early = times.filter((x) => x > at + quietFrom && x < at + quietTo);
      expect(early, `requests within ${quietFrom}–${quietTo} ms after a 429 at +${at - stormStart} ms`).toEqual([]);
    }
    const [row] = (await t.db.execute(
      sql`select rate_limited::int as n from model_rate_limits where endpoint = ${catalogEndpointKey({ baseURL: fake.url, model: "storm-model" })}`,
    )) as unknown as { n: number }[];
    expect(row?.n).toBe(answered429.length);
  });
});
