import { batchSubagent } from "@/server/agent/registry";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { submitBatch } from "@/server/batches/submit";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { type FakeOpenAI, startFakeOpenAI } from "../helpers/fake-openai";
import { call, getProjection, waitUntil, Workers } from "./support";

/**
 * max_cost_usd priced from the model catalog: a worker process runs items on a priced
 * `models[]` entry (a local OpenAI-compatible fake reporting exact usage), and the batch
 * pauses at its dollar budget with cost_usd = tokens × catalog prices.
 */

const workers = new Workers();
let t: TestDatabase;
let fake: FakeOpenAI;
let user: TestUser;
// $2 per million input and $10 per million output tokens; every call uses 1,000 in + 100 out = $0.003.
const PRICES = { price_per_million_input: 2, price_per_million_output: 10 };
const PER_CALL = (1_000 * 2 + 100 * 10) / 1_000_000;

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  user = await makeUser(t, "cost");
  fake = await startFakeOpenAI({
    handler: async () => {
      await new Promise((r) => setTimeout(r, 150));
      return { type: "text", text: "priced answer", usage: { prompt_tokens: 1_000, completion_tokens: 100 } };
    },
  });
});

afterAll(async () => {
  await fake?.close();
});

describe("max_cost_usd", () => {
  it("pauses at the dollar budget priced from the catalog, overshoot bounded by the running limit", async () => {
    const models = [{ name: "priced", base_url: fake.url, model: "fake-priced", ...PRICES }];
    workers.spawn({ FLOTILLA__MODELS: JSON.stringify(models), FLOTILLA__DEFAULT_MODEL: "priced" });
    await workers.waitAlive(1);
    const threadId = await makeThread(t, user);
    const config = testConfig({ models });
    const budget = PER_CALL * 3.5;
    const maxRunning = 2;
    const { batch } = await submitBatch(t.db, { ...batchSubagent(config, undefined),
      userId: user.userId,
      threadId,
      input: {
        submission_key: "priced",
        items: Array.from({ length: 30 }, (_, i) => `priced item ${i}`),
        max_running_items: maxRunning,
        max_cost_usd: budget,
      },
      config,
      model: { name: "fake-priced", simulator: false, catalogName: "priced" },
    });
    const paused = await waitUntil(
      "cost pause",
      async () => {
        const p = await getProjection(user.token, threadId, batch.id);
        return p.status === "paused" && p.counts.leased + p.counts.running === 0 ? p : undefined;
      },
      60_000,
    );
    expect(paused.pause_reason).toBe("budget");
    expect(paused.budget.max_cost_usd).toBe(budget);
    const calls = paused.counts.succeeded;
    expect(paused.usage).toEqual({ input_tokens: calls * 1_000, output_tokens: calls * 100 , cached_input_tokens: 0, cache_write_tokens: 0 });
    expect(paused.cost_usd).toBeCloseTo(calls * PER_CALL, 10);
    expect(paused.budget.used_cost_usd).toBeCloseTo(calls * PER_CALL, 10);
    expect(paused.cost_usd).toBeGreaterThanOrEqual(budget);
    expect(paused.cost_usd - budget).toBeLessThan(maxRunning * PER_CALL);
    expect(calls).toBeLessThan(30);

    const below = await call("POST", `/api/threads/${threadId}/subagent-batches/${batch.id}/budget`, {
      token: user.token,
      json: { max_cost_usd: PER_CALL },
    });
    expect(below.status).toBe(400);
    expect(((await below.json()) as { error: { message: string } }).error.message).toMatch(/^max_cost_usd: must be at least the \$0\.0\d+ /);
  }, 90_000);
});
