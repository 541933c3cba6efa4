import { APICallError } from "@ai-sdk/provider";
import { generateText, streamText, wrapLanguageModel } from "ai";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { createDatabase, type Database } from "@/server/db/client";
import { metricsRegistry } from "@/server/metrics";
import { classifyModelError, retryAfterMs } from "@/server/runtime/model-errors";
import { createSimulatorModel } from "@/server/models/simulator";
import { log } from "@/server/log";
import { BURST_MS, type RateLimitSettings, rateLimitMiddleware, SharedRateLimiter } from "@/server/runtime/rate-limit";
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
      Array.from({ length: 9 }, (_, k) => limiters[k % 2]!.acquire(endpoint, { estimatedTokens: 100, outputTokens: 900 })),
    );
    // No call waits for a first one's answer (that probe held the others up to 5 s).
    expect(Date.now() - t0).toBeLessThan(2_000);
    expect(reservations.every((r) => r.counted && r.probe === false)).toBe(true);
    // Until an answer says what a call writes, each debits its prompt plus the assumed output.
    expect(reservations.map((r) => r.estimatedTokens)).toEqual(Array(9).fill(1_000));
    // A learning endpoint's bucket holds a second's share: part of it (BURST_MS) goes at once,
    // then one call every 100 ms. Never more than the burst plus the rate in any window.
    const starts = reservations.map((r) => r.startAtMs ?? Number.NaN).sort((a, b) => a - b);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[0]!).toBeGreaterThanOrEqual(i * 100 - BURST_MS - 0.1);
    const atOnce = BURST_MS / 100 + 1; // the burst and the call it is ahead of
    expect(starts[atOnce - 1]! - starts[0]!).toBeLessThan(60);
    expect(starts[atOnce]! - starts[0]!).toBeGreaterThanOrEqual(99.9);
    expect(starts[8]! - starts[7]!).toBeGreaterThanOrEqual(99.9);
    expect(Math.max(...reservations.map((r) => r.burstMs ?? 0))).toBeCloseTo(BURST_MS, -1);
    // Nothing stated: the first call still goes alone to learn the limits.
    const unstated = "race:unstated-learn";
    const probe = await limiterOn(2, { learn: true }).acquire(unstated, { batch: true });
    expect(probe.probe).toBe(true);
    const second = await limiterOn(3, { learn: true, maxWaitMs: 60_000 }).acquire(unstated, { batch: true, signal: AbortSignal.timeout(300) }).catch((e) => e);
    expect(second).toBeInstanceOf(Error); // still held for the probe's answer after 300 ms
  });

  it("headers it cannot trust never stop calls or park the endpoint, and each is logged once", async () => {
    const endpoint = "race:bad-headers";
    const warn = vi.spyOn(log, "warn");
    const limiter = limiterOn(0, { learn: true, maxRetryAfterMs: 60_000 });
    const probe = await limiter.acquire(endpoint, { batch: true });
    expect(probe.probe).toBe(true);
    const bad = {
      "x-ratelimit-limit-requests": "lots", // does not parse
      "x-ratelimit-limit-tokens": "0", // a limit of 0
      "anthropic-ratelimit-input-tokens-limit": "100",
      "anthropic-ratelimit-input-tokens-remaining": "5000", // remaining above the limit
      "anthropic-ratelimit-output-tokens-limit": "6000",
      "anthropic-ratelimit-output-tokens-remaining": "0",
      "anthropic-ratelimit-output-tokens-reset": "2027-12-07T00:00:00Z", // a year away
    };
    await limiter.recordAnswer(endpoint, bad, probe);
    for (let i = 0; i < 5; i++) await limiter.recordAnswer(endpoint, bad);
    const [learned] = (await t.db.execute(sql`
      select learned_requests_per_minute as rpm, learned_tokens_per_minute as tpm, learned_input_tokens_per_minute as itpm,
             learned_output_tokens_per_minute as otpm, share_output_tokens as oshare
        from model_rate_limits where endpoint = ${endpoint}`)) as unknown as Record<string, number | null>[];
    // Only the output limit is believed; its remaining of 0 means nothing without a usable reset.
    expect(learned).toEqual({ rpm: null, tpm: null, itpm: null, otpm: 6000, oshare: 1 });
    // Calls go on at once: nothing paces at "0", "lots" or a bucket that refills in a year.
    const t0 = Date.now();
    await Promise.all(Array.from({ length: 10 }, () => limiter.acquire(endpoint, { estimatedTokens: 10, outputTokens: 0, batch: true })));
    expect(Date.now() - t0).toBeLessThan(1_000);
    // A retry-after a year away parks the endpoint for 60 s at most.
    await limiter.recordRateLimited(endpoint, 365 * 86_400_000);
    const slow = Number((await row(endpoint))?.slow_ms);
    expect(slow).toBeGreaterThan(50_000);
    expect(slow).toBeLessThanOrEqual(60_000);
    const logged = warn.mock.calls.filter((c) => String(c[1]).includes("cannot trust")).map((c) => (c[0] as { problem: string }).problem);
    warn.mockRestore();
    expect(logged.map((p) => p.split(":")[0]).sort()).toEqual([
      "anthropic-ratelimit-input-tokens-remaining",
      "anthropic-ratelimit-output-tokens-reset",
      "retry-after",
      "x-ratelimit-limit-requests",
      "x-ratelimit-limit-tokens",
    ]);
  });

  it("a share discounts the provider's bucket our own burst drew, and a kind not reported keeps its share", async () => {
    const endpoint = "race:burst-share";
    const limiter = limiterOn(1, { learn: true });
    const answer = (remaining: number, burstMs: number) =>
      limiter.recordAnswer(
        endpoint,
        // 240,000 tokens a minute: a bucket of 4,000 that refills one every 0.25 ms.
        { "x-ratelimit-limit-tokens": "240000", "x-ratelimit-remaining-tokens": String(remaining), "x-ratelimit-reset-tokens": `${(4000 - remaining) / 4}ms` },
        { waitedMs: 0, estimatedTokens: 0, counted: true, probe: true, burstMs },
      );
    const shares = async () =>
      ((await t.db.execute(sql`select share_requests as r, share_tokens as t from model_rate_limits where endpoint = ${endpoint}`)) as unknown as {
        r: number;
        t: number;
      }[])[0];
    await limiter.acquire(endpoint, { batch: true });
    await answer(3800, 0);
    expect(await shares()).toEqual({ r: 1, t: 1 });
    // 1,800 of 4,000 left: (0.45 + our burst's share of the bucket, 400 ms of 1 s) / 0.8 ≥ 1.
    await answer(1800, BURST_MS);
    expect(await shares()).toEqual({ r: 1, t: 1 });
    // 1,000 left: more drained than our burst explains, so someone else draws: (0.25 + 0.4) / 0.8.
    await answer(1000, BURST_MS);
    const s = await shares();
    expect(s?.t).toBeCloseTo((0.25 + BURST_MS / 1000) / 0.8, 2);
    // The requests share was never reported: it stays 1 (it used to grow past 1 with every answer).
    expect(s?.r).toBe(1);
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
