import { APICallError, EmptyResponseBodyError } from "@ai-sdk/provider";
import { NoOutputGeneratedError, RetryError, streamText } from "ai";
import { describe, expect, it } from "vitest";
import { classifyModelError, retryAfterMs, trackModelErrors } from "@/server/runtime/model-errors";
import { createSimulatorModel } from "@/server/models/simulator";

function apiError(statusCode: number, responseHeaders?: Record<string, string>) {
  return new APICallError({ message: `HTTP ${statusCode}`, url: "http://x", requestBodyValues: {}, statusCode, responseHeaders });
}

describe("classifyModelError", () => {
  it("sorts the error shapes model calls produce", () => {
    expect(classifyModelError(apiError(429))).toBe("rate_limit");
    expect(classifyModelError(apiError(500))).toBe("provider");
    expect(classifyModelError(apiError(401))).toBe("provider");
    expect(classifyModelError(apiError(504))).toBe("timeout");
    expect(classifyModelError(new EmptyResponseBodyError())).toBe("provider");
    expect(classifyModelError(new DOMException("aborted", "AbortError"))).toBe("aborted");
    expect(classifyModelError(new DOMException("too slow", "TimeoutError"))).toBe("timeout");
    expect(classifyModelError(new Error("something else"))).toBe("unknown");
    expect(classifyModelError(undefined)).toBe("unknown");
    expect(classifyModelError("string failure")).toBe("unknown");
    expect(classifyModelError({ status: 429, message: "other client" })).toBe("rate_limit");
    expect(classifyModelError(new NoOutputGeneratedError())).toBe("unknown");
  });

  it("looks through RetryError and cause chains", () => {
    const retried = new RetryError({ message: "failed", reason: "maxRetriesExceeded", errors: [apiError(429), apiError(429)] });
    expect(classifyModelError(retried)).toBe("rate_limit");
    const mixed = new RetryError({ message: "failed", reason: "errorNotRetryable", errors: [apiError(429), apiError(400)] });
    expect(classifyModelError(mixed)).toBe("provider");
    const abortedRetry = new RetryError({ message: "aborted", reason: "abort", errors: [apiError(429)] });
    expect(classifyModelError(abortedRetry)).toBe("aborted");
    const wrapped = new Error("stream failed", { cause: new Error("inner", { cause: apiError(429) }) });
    expect(classifyModelError(wrapped)).toBe("rate_limit");
    const cyclic: { name: string; cause?: unknown } = { name: "Weird" };
    cyclic.cause = cyclic;
    expect(classifyModelError(cyclic)).toBe("unknown");
  });
});

describe("retryAfterMs", () => {
  it("reads retry-after seconds, retry-after-ms (preferred) and HTTP dates", () => {
    expect(retryAfterMs(apiError(429, { "retry-after": "3" }))).toBe(3000);
    expect(retryAfterMs(apiError(429, { "Retry-After": "0.5" }))).toBe(500);
    expect(retryAfterMs(apiError(429, { "retry-after": "3", "retry-after-ms": "1250" }))).toBe(1250);
    const now = Date.parse("2030-01-01T00:00:00Z");
    expect(retryAfterMs(apiError(429, { "retry-after": "Tue, 01 Jan 2030 00:00:07 GMT" }), now)).toBe(7000);
    expect(retryAfterMs(apiError(429, { "retry-after": "Mon, 31 Dec 2029 23:59:00 GMT" }), now)).toBe(0);
    expect(retryAfterMs(apiError(429, { "retry-after": "soon" }))).toBeUndefined();
    expect(retryAfterMs(apiError(429))).toBeUndefined();
    expect(retryAfterMs(new Error("no headers"))).toBeUndefined();
  });

  it("takes the latest attempt's advice from a RetryError and follows causes", () => {
    const retried = new RetryError({
      message: "failed",
      reason: "maxRetriesExceeded",
      errors: [apiError(429, { "retry-after": "9" }), apiError(429, { "retry-after": "2" })],
    });
    expect(retryAfterMs(retried)).toBe(2000);
    expect(retryAfterMs(new Error("wrapped", { cause: apiError(429, { "retry-after-ms": "40" }) }))).toBe(40);
  });
});

describe("classifying streamText failures", () => {
  it("recovers the model's error that streamText hides behind NoOutputGeneratedError", async () => {
    const model = createSimulatorModel({ latencyMs: 0 });
    const tracker = trackModelErrors();
    const result = streamText({ model, prompt: "busy [[429]]", maxRetries: 0, onError: tracker.onError });
    const thrown = await Promise.resolve(result.text).catch((e: unknown) => e);
    expect(classifyModelError(thrown)).toBe("unknown");
    expect(classifyModelError(tracker.error(thrown))).toBe("rate_limit");
    expect(retryAfterMs(tracker.error(thrown))).toBe(1000);
    const clean = trackModelErrors();
    expect(clean.error("fallback")).toBe("fallback");
  });

  it("uses the call's signal for aborts with custom reasons and timeouts", async () => {
    const model = createSimulatorModel({ latencyMs: 1000 });
    const stop = new AbortController();
    const tracker = trackModelErrors();
    const result = streamText({ model, prompt: "long", abortSignal: stop.signal, onError: tracker.onError });
    setTimeout(() => stop.abort(new Error("user pressed stop")), 30);
    const thrown = await Promise.resolve(result.text).catch((e: unknown) => e);
    expect(classifyModelError(tracker.error(thrown))).toBe("unknown");
    expect(classifyModelError(tracker.error(thrown), { signal: stop.signal })).toBe("aborted");

    const timeout = AbortSignal.timeout(30);
    const slow = streamText({ model, prompt: "long", abortSignal: timeout, onError: () => {} });
    const timedOut = await Promise.resolve(slow.text).catch((e: unknown) => e);
    expect(classifyModelError(timedOut, { signal: timeout })).toBe("timeout");
    expect(classifyModelError(new Error("x"), { signal: AbortSignal.abort() })).toBe("aborted");
  });
});
