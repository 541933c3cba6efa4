import { describe, expect, it } from "vitest";
import {
  bucketFullness,
  bucketSpanMs,
  geminiRetryDelayMs,
  MAX_RESET_MS,
  parseDurationMs,
  parseProviderLimits,
  retryAfterFromHeaders,
} from "@/server/runtime/provider-limits";

const NOW = Date.parse("2026-12-07T12:00:00.000Z");

describe("provider rate-limit headers", () => {
  it("reads OpenAI's x-ratelimit-* with Go-style reset durations", () => {
    const p = parseProviderLimits(
      {
        "X-RateLimit-Limit-Requests": "1200",
        "x-ratelimit-remaining-requests": "1199",
        "x-ratelimit-reset-requests": "50ms",
        "x-ratelimit-limit-tokens": "240000",
        "x-ratelimit-remaining-tokens": "239000",
        "x-ratelimit-reset-tokens": "6m0s",
      },
      NOW,
    );
    expect(p.limits.requests).toEqual({ limit: 1200, remaining: 1199, resetMs: 50 });
    // 6 minutes is beyond a per-minute window: the reset is dropped (and named), the limit kept.
    expect(p.limits.tokens).toEqual({ limit: 240000, remaining: 239000 });
    expect(p.problems).toEqual([expect.stringMatching(/^x-ratelimit-reset-tokens: 360 s away/)]);
  });

  it("parses durations as OpenAI writes them", () => {
    expect(parseDurationMs("12ms")).toBe(12);
    expect(parseDurationMs("1.5s")).toBe(1500);
    expect(parseDurationMs("1m30s")).toBe(90_000);
    expect(parseDurationMs("1h2m3s")).toBe(3_723_000);
    expect(parseDurationMs("2")).toBe(2000);
    for (const bad of ["", "s", "5 s", "-3s", "1e3s", "NaN", "Infinity", "3d", "1s; drop table", "9".repeat(50)])
      expect(parseDurationMs(bad), bad).toBeUndefined();
  });

  it("reads Anthropic's anthropic-ratelimit-* with RFC 3339 resets, input and output apart", () => {
    const p = parseProviderLimits(
      {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2026-12-07T12:00:01.200Z",
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-input-tokens-reset": "2026-12-07T12:00:02Z",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "8000",
        "anthropic-ratelimit-output-tokens-reset": "2026-12-07T11:59:00Z",
        "retry-after": "3",
      },
      NOW,
    );
    expect(p.limits.requests).toEqual({ limit: 50, remaining: 49, resetMs: 1200 });
    expect(p.limits.input_tokens).toEqual({ limit: 40000, remaining: 39000, resetMs: 2000 });
    expect(p.limits.output_tokens).toEqual({ limit: 8000, remaining: 8000, resetMs: 0 }); // a reset in the past: full now
    expect(p.limits.tokens).toBeUndefined();
    expect(p.retryAfterMs).toBe(3000);
    expect(p.problems).toEqual([]);
  });

  it("drops hostile values and names each, never yielding a limit that could stop calls", () => {
    const p = parseProviderLimits(
      {
        "x-ratelimit-limit-requests": "0",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "5000000",
        "x-ratelimit-reset-tokens": "8760h",
        "anthropic-ratelimit-input-tokens-limit": "lots",
        "anthropic-ratelimit-output-tokens-limit": "1e400",
        "anthropic-ratelimit-requests-limit": "-5",
      },
      NOW,
    );
    expect(p.limits.requests).toBeUndefined(); // a limit of 0 is no limit to pace at
    expect(p.limits.tokens).toBeUndefined(); // remaining above the limit: that limit is not believed
    expect(p.limits.input_tokens).toBeUndefined();
    expect(p.limits.output_tokens).toBeUndefined();
    expect(p.problems.map((x) => x.split(":")[0])).toEqual([
      "x-ratelimit-limit-requests",
      "anthropic-ratelimit-requests-limit",
      "x-ratelimit-remaining-tokens",
      "anthropic-ratelimit-input-tokens-limit",
      "anthropic-ratelimit-output-tokens-limit",
    ]);
    // A reset a year away (a duration or an RFC 3339 instant) is dropped, the limit kept.
    const far = parseProviderLimits({ "x-ratelimit-limit-tokens": "1000", "x-ratelimit-reset-tokens": "8760h" }, NOW);
    expect(far.limits.tokens).toEqual({ limit: 1000 });
    expect(far.problems).toEqual([expect.stringMatching(/^x-ratelimit-reset-tokens: 31536000 s away/)]);
    const year = parseProviderLimits(
      { "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-reset": "2027-12-07T12:00:00Z" },
      NOW,
    );
    expect(year.limits.requests).toEqual({ limit: 50 });
    expect(year.problems).toHaveLength(1);
    expect(MAX_RESET_MS).toBe(60_000);
  });

  it("ignores a response without limit headers and unrelated headers", () => {
    expect(parseProviderLimits({ "content-type": "application/json" })).toEqual({ limits: {}, problems: [] });
    expect(parseProviderLimits(undefined)).toEqual({ limits: {}, problems: [] });
  });

  it("reads retry-after-ms, retry-after seconds and HTTP dates", () => {
    expect(retryAfterFromHeaders({ "retry-after-ms": "12.5" })).toBe(13);
    expect(retryAfterFromHeaders({ "Retry-After": "2" })).toBe(2000);
    expect(retryAfterFromHeaders({ "retry-after": "Mon, 07 Dec 2026 12:00:05 GMT" }, NOW)).toBe(5000);
    expect(retryAfterFromHeaders({ "retry-after": "soon" })).toBeUndefined();
    expect(retryAfterFromHeaders({ "retry-after-ms": "-1" })).toBeUndefined();
  });

  it("reads Gemini's RetryInfo from a 429 body, and nothing from garbage", () => {
    const body = {
      error: {
        code: 429,
        status: "RESOURCE_EXHAUSTED",
        details: [
          { "@type": "type.googleapis.com/google.rpc.QuotaFailure", violations: [] },
          { "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "31s" },
        ],
      },
    };
    expect(geminiRetryDelayMs(JSON.stringify(body))).toBe(31_000);
    expect(geminiRetryDelayMs(body)).toBe(31_000);
    expect(geminiRetryDelayMs("not json")).toBeUndefined();
    expect(geminiRetryDelayMs({ error: { details: [{ "@type": "x.RetryInfo", retryDelay: "forever" }] } })).toBeUndefined();
    expect(geminiRetryDelayMs(null)).toBeUndefined();
  });

  it("how full the provider's bucket is, from remaining and reset", () => {
    // 1,200/min refills 20 a second: 10 left and 500 ms to full means a bucket of 20, half full.
    expect(bucketFullness({ limit: 1200, remaining: 10, resetMs: 500 })).toBeCloseTo(0.5, 5);
    expect(bucketFullness({ limit: 1200, remaining: 19, resetMs: 50 })).toBeCloseTo(0.95, 5);
    expect(bucketFullness({ limit: 1200, remaining: 0, resetMs: 1000 })).toBe(0);
    expect(bucketFullness({ limit: 1200, remaining: 10 })).toBeUndefined();
    // Before the answer's own request: a bucket of two at our own pace reads 0 left, yet was half full.
    expect(bucketFullness({ limit: 120, remaining: 0, resetMs: 1000 }, 1)).toBeCloseTo(0.5, 5);
    // The bucket's span: one second's share refills in a second, whatever the limit.
    expect(bucketSpanMs({ limit: 1200, remaining: 10, resetMs: 500 })).toBeCloseTo(1000, 5);
    expect(bucketSpanMs({ limit: 240_000, remaining: 1000, resetMs: 750 })).toBeCloseTo(1000, 5);
    expect(bucketSpanMs({ limit: 1200, remaining: 10 })).toBeUndefined();
  });
});
