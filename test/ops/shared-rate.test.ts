import { sql } from "drizzle-orm";
import { catalogEndpointKey } from "@/server/runtime/rate-limit";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { seedOwner, startWorkerProcess, stopAllWorkerProcesses, submit, waitForBatch } from "./support";

/**
 * Two real worker processes share one budget of 60 requests per minute on a fast fake
 * provider. The provider measures: requests arrive one second apart across both workers, so the
 * rate over the window is 60/min ± 10 % — where, unlimited, 26 items would finish in well under
 * a second.
 */

const ITEMS = 26; // 25 intervals of 1 s: a 25 s window

let t: TestDatabase;
let fake: FakeOpenAI;

beforeAll(async () => {
  t = await createTestDatabase();
  fake = await startFakeOpenAI({ handler: () => ({ type: "text", text: "ok", chunkDelayMs: 0 }) });
});
afterAll(async () => {
  await stopAllWorkerProcesses();
  await fake?.close();
});

describe("provider-wide requests-per-minute budget across worker processes", () => {
  it("two workers together stay at 60 requests/minute (±10 %)", { timeout: 120_000 }, async () => {
    const env = {
      MODEL_BASE_URL: fake.url,
      MODEL_API_KEY: "test-key",
      MODEL_NAME: "rate-model",
      FLOTILLA__RATE_LIMITS__REQUESTS_PER_MINUTE: "60",
      FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "8",
    };
    await Promise.all([startWorkerProcess({ databaseUrl: t.url, env }), startWorkerProcess({ databaseUrl: t.url, env })]);
    const owner = await seedOwner(t.db);
    const batch = await submit(
      t.db,
      owner,
      Array.from({ length: ITEMS }, (_, i) => `item ${i + 1}`),
      { maxRunning: 16, simulator: false, modelName: "default" },
    );
    const done = await waitForBatch(t.db, batch.id, 90_000);
    expect(done).toMatchObject({ status: "completed", succeeded: ITEMS, failed: 0 });

    const times = fake.requests.map((r) => r.receivedAt).sort((a, b) => a - b);
    expect(times).toHaveLength(ITEMS); // one call per item, nothing retried
    const windowMs = (times.at(-1) as number) - (times[0] as number);
    const perMinute = ((times.length - 1) * 60_000) / windowMs;
    console.info(`shared budget 60/min: measured ${perMinute.toFixed(2)}/min over ${(windowMs / 1000).toFixed(1)} s`);
    expect(perMinute).toBeGreaterThanOrEqual(54);
    expect(perMinute).toBeLessThanOrEqual(66);
    // Evenly spaced, not bursts that average out: no two requests much closer than 1 s (each is
    // reserved 1 s after the previous one; the margin absorbs event-loop lag in two processes).
    const gaps = times.slice(1).map((x, i) => x - (times[i] as number));
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(700);

    // Both processes drew from the budget.
    const [workers] = (await t.db.execute(
      sql`select count(distinct worker_id)::int as n from subagent_batch_item_attempts where batch_id = ${batch.id}`,
    )) as unknown as { n: number }[];
    expect(workers?.n).toBe(2);
    const [row] = (await t.db.execute(
      sql`select requests::int as requests from model_rate_limits where endpoint = ${catalogEndpointKey({ baseURL: fake.url, model: "rate-model" })}`,
    )) as unknown as { requests: number }[];
    expect(row?.requests).toBe(ITEMS);
  });
});
