import { APICallError } from "@ai-sdk/provider";
import { generateText, streamText, wrapLanguageModel } from "ai";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase, type Database } from "@/server/db/client";
import { metricsRegistry } from "@/server/metrics";
import { classifyModelError, retryAfterMs } from "@/server/runtime/model-errors";
import { createSimulatorModel } from "@/server/models/simulator";
import { type RateLimitSettings, rateLimitMiddleware, SharedRateLimiter } from "@/server/runtime/rate-limit";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

const base: RateLimitSettings = {
  requestsPerMinute: 0,
  tokensPerMinute: 0,
  maxWaitMs: 60_000,
  defaultRetryAfterMs: 1_000,
  maxRetryAfterMs: 600_000,
};

let t: TestDatabase;
/** Separate connection pools stand in for separate processes. */
const pools: Database[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  for (let i = 0; i < 4; i++) pools.push(createDatabase(t.url, { max: 3, applicationName: `limiter-${i}` }));
});
afterAll(async () => {
  await Promise.all(pools.map((p) => p.close()));
});

const limiterOn = (i: number, settings: Partial<RateLimitSettings>) =>
  new SharedRateLimiter({ ...base, ...settings }, () => pools[i]?.db);

async function row(endpoint: string) {
  const [r] = (await t.db.execute(
    sql`select requests::int, tokens::int, rate_limited::int,
          extract(epoch from (slow_until - now())) * 1000 as slow_ms,
          extract(epoch from next_token_at) * 1000 as next_token_ms
        from model_rate_limits where endpoint = ${endpoint}`,
  )) as unknown as {
    requests: number;
    tokens: number;
    rate_limited: number;
    slow_ms: string | null;
    next_token_ms: string;
  }[];
  return r;
}

describe("shared rate limiter (PostgreSQL schedule)", () => {
  it("spaces concurrent reservations from four processes exactly one interval apart", async () => {
    const endpoint = "race:rpm";
    const limiters = [0, 1, 2, 3].map((i) => limiterOn(i, { requestsPerMinute: 1_200 })); // 50 ms apart
    // Open every pool's connections first so the race is between queries, not connection setups.
    await Promise.all(pools.flatMap((p) => [1, 2, 3].map(() => p.db.execute(sql`select pg_sleep(0.05)`))));
    const started = Date.now();
    const reservations = await Promise.all(
      Array.from({ length: 40 }, (_, k) => limiters[k % 4]!.acquire(endpoint)),
    );
    const elapsed = Date.now() - started;
    const starts = reservations.map((r) => r.startAtMs ?? Number.NaN).sort((a, b) => a - b);
    expect(reservations.every((r) => r.counted)).toBe(true);
    // Never two starts closer than one interval (a gap is longer only if the schedule ran idle,
    // e.g. while a pool was still connecting on a busy machine).
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(49.99);
    // 40 requests at 20/s: the last one cannot start before 39 intervals have passed.
    expect(elapsed).toBeGreaterThanOrEqual(39 * 50 - 20);
    expect((await row(endpoint))?.requests).toBe(40);
  });

  it("debits estimated tokens up front and corrects them with the real usage", async () => {
    const endpoint = "race:tpm";
    const limiter = limiterOn(0, { tokensPerMinute: 60_000 }); // 1 ms per token
    const first = await limiter.acquire(endpoint, { estimatedTokens: 100 });
    const before = Number((await row(endpoint))?.next_token_ms);
    expect(before - (first.startAtMs ?? 0)).toBeCloseTo(100, 0);
    await limiter.settle(endpoint, first, { input: 400 }); // the call really used 400 tokens
    const after = await row(endpoint);
    expect(Number(after?.next_token_ms) - before).toBeCloseTo(300, 0);
    expect(after?.tokens).toBe(400);
    const second = await limiterOn(1, { tokensPerMinute: 60_000 }).acquire(endpoint, { estimatedTokens: 10 });
    expect((second.startAtMs ?? 0) - (first.startAtMs ?? 0)).toBeGreaterThanOrEqual(399.9);
    // What calls lately used is debited up front, not the 10-token estimate: calls in flight are
    // not under-counted until they settle (64 slots would otherwise overrun a token bucket).
    expect(second.estimatedTokens).toBe(400);
  });

  it("a stated limit paces a learning endpoint from its first call, the assumed output debited", async () => {
    const endpoint = "race:stated-learn";
    // 600,000 tokens/min: 100 ms per 1,000 tokens. Nothing is known of the endpoint yet.
    const limiters = [0, 1].map((i) => limiterOn(i, { tokensPerMinute: 600_000, learn: true }));
    const t0 = Date.now();
    const reservations = await Promise.all(
      Array.from({ length: 4 }, (_, k) => limiters[k % 2]!.acquire(endpoint, { estimatedTokens: 100, outputTokens: 900, batch: true })),
    );
    // No call waits for a first one's answer (that probe held the others up to 5 s).
    expect(Date.now() - t0).toBeLessThan(1_500);
    expect(reservations.every((r) => r.counted && r.probe === false)).toBe(true);
    // Until an answer says what a call writes, each debits its prompt plus the assumed output.
    expect(reservations.map((r) => r.estimatedTokens)).toEqual([1_000, 1_000, 1_000, 1_000]);
    const starts = reservations.map((r) => r.startAtMs ?? Number.NaN).sort((a, b) => a - b);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).toBeGreaterThanOrEqual(99.9);
    // Nothing stated: the first call still goes alone to learn the limits.
    const unstated = "race:unstated-learn";
    const probe = await limiterOn(2, { learn: true }).acquire(unstated, { batch: true });
    expect(probe.probe).toBe(true);
    const second = await limiterOn(3, { learn: true, maxWaitMs: 60_000 }).acquire(unstated, { batch: true, signal: AbortSignal.timeout(300) }).catch((e) => e);
    expect(second).toBeInstanceOf(Error); // still held for the probe's answer after 300 ms
  });

  it("a 429 recorded by one process holds back every other process until retry-after", async () => {
    const endpoint = "race:429";
    await limiterOn(0, {}).recordRateLimited(endpoint, 700);
    const r = await row(endpoint);
    expect(r?.rate_limited).toBe(1);
    expect(Number(r?.slow_ms)).toBeGreaterThan(500);
    // Budgets off in this "process": it still reads the endpoint's slow_until and waits.
    const off = limiterOn(1, {});
    const t0 = Date.now();
    await off.acquire(endpoint);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(450);
    // Budgets on: the reservation starts no earlier than slow_until.
    await limiterOn(2, {}).recordRateLimited(endpoint, 400);
    const t1 = Date.now();
    const on = await limiterOn(3, { requestsPerMinute: 6_000 }).acquire(endpoint);
    expect(on.waitedMs).toBeGreaterThan(250);
    expect(Date.now() - t1).toBeGreaterThanOrEqual(250);
  });

  it("refuses a wait beyond maxWait with a 429-classified error carrying the wait, without reserving", async () => {
    const endpoint = "race:maxwait";
    const limiter = limiterOn(0, { requestsPerMinute: 60, maxWaitMs: 1_500 }); // 1 s apart
    await limiter.acquire(endpoint);
    await limiter.acquire(endpoint, { signal: AbortSignal.timeout(5_000) }).catch(() => {}); // waits ~1 s
    // Occupy the schedule 3 s ahead by hand, then ask: 3 s > 1.5 s.
    await t.db.execute(
      sql`update model_rate_limits set next_request_at = now() + interval '3 seconds' where endpoint = ${endpoint}`,
    );
    const err = await limiter.acquire(endpoint).catch((e) => e);
    expect(APICallError.isInstance(err)).toBe(true);
    expect(classifyModelError(err)).toBe("rate_limit");
    expect(retryAfterMs(err)).toBeGreaterThan(2_500);
    expect(retryAfterMs(err)).toBeLessThanOrEqual(3_000);
    expect((await row(endpoint))?.requests).toBe(2); // the refused call reserved nothing
  });

  it("an abort while waiting rejects at once with the abort reason", async () => {
    const endpoint = "race:abort";
    const limiter = limiterOn(0, { requestsPerMinute: 30 }); // 2 s apart
    await limiter.acquire(endpoint);
    const controller = new AbortController();
    const t0 = Date.now();
    const pending = limiter.acquire(endpoint, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error("stop")), 100);
    await expect(pending).rejects.toThrow("stop");
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it("fails open when the database is unreachable", async () => {
    const dead = createDatabase("postgres://postgres@127.0.0.1:1/none", { max: 1 });
    try {
      const limiter = new SharedRateLimiter({ ...base, requestsPerMinute: 1 }, () => dead.db);
      const r = await limiter.acquire("dead:endpoint");
      expect(r.counted).toBe(false);
    } finally {
      await dead.close();
    }
  });
});

describe("rate-limit middleware around a model", () => {
  it("spaces generate and stream calls, and records a provider 429 for every process", async () => {
    const limiter = limiterOn(0, { requestsPerMinute: 600 }); // 100 ms apart
    const model = wrapLanguageModel({
      model: createSimulatorModel({ latencyMs: 0 }),
      middleware: rateLimitMiddleware({ limiter, endpoint: "mw:sim" }),
    });
    const t0 = Date.now();
    for (let i = 0; i < 3; i++) await generateText({ model, prompt: `hello ${i}` });
    const s = streamText({ model, prompt: "streamed" });
    expect((await s.text).length).toBeGreaterThan(0);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300 - 20);
    expect((await row("mw:sim"))?.requests).toBe(4);

    const err = await generateText({ model, prompt: "[[429]]", maxRetries: 0 }).catch((e) => e);
    expect(classifyModelError(err)).toBe("rate_limit");
    const r = await row("mw:sim");
    expect(r?.rate_limited).toBe(1);
    expect(Number(r?.slow_ms)).toBeGreaterThan(500); // simulator says retry-after: 1

    const calls = ((await metricsRegistry().getSingleMetric("flotilla_model_call_duration_seconds")?.get())?.values ??
      []) as Array<{ value: number; labels: Record<string, string | number>; metricName?: string }>;
    const count = (outcome: string) =>
      calls.find(
        (v) => v.labels.outcome === outcome && v.labels.endpoint === "mw:sim" && v.metricName?.endsWith("_count"),
      )?.value;
    expect(count("ok")).toBe(4);
    expect(count("rate_limited")).toBe(1);
    const tokens = (await metricsRegistry().getSingleMetric("flotilla_model_tokens_total")?.get())?.values ?? [];
    expect(tokens.find((v) => v.labels.endpoint === "mw:sim" && v.labels.direction === "output")?.value).toBeGreaterThan(0);
  });
});
