import { APICallError } from "@ai-sdk/provider";
import { NoOutputGeneratedError, RetryError } from "ai";
import { geminiRetryDelayMs, retryAfterFromHeaders } from "./provider-limits";

export type ModelErrorClass = "rate_limit" | "timeout" | "aborted" | "provider" | "unknown";

/**
 * Why a run failed: a model error class, a tool group / model this process cannot provide, or a
 * typed answer still invalid against its output schema after the repair turn.
 */
export type RunErrorClass = ModelErrorClass | "tool_unavailable" | "model_unavailable" | "invalid_output" | "invalid_usage";

const MAX_DEPTH = 5;

function errorName(err: unknown): string | undefined {
  return err && typeof err === "object" && "name" in err && typeof err.name === "string" ? err.name : undefined;
}

function statusOf(err: unknown): number | undefined {
  if (APICallError.isInstance(err)) return err.statusCode;
  // Errors from other clients that carry an HTTP status (e.g. { status: 429 }).
  if (err && typeof err === "object") {
    const e = err as { statusCode?: unknown; status?: unknown };
    if (typeof e.statusCode === "number") return e.statusCode;
    if (typeof e.status === "number") return e.status;
  }
  return undefined;
}

/** The error a wrapper stands for: a RetryError's last attempt, or an error's cause. */
function inner(err: unknown): unknown {
  if (RetryError.isInstance(err)) return err.lastError;
  if (err && typeof err === "object" && "cause" in err) return (err as { cause?: unknown }).cause;
  return undefined;
}

/**
 * Sorts a model-call failure into the classes the runtime reacts to: rate limits are deferred and
 * retried after retry-after, timeouts and aborts end the run with that status, provider errors
 * fail it. Looks through the AI SDK's RetryError (retries of 429s) and `cause` chains. Pass the
 * call's signal so an abort with a custom reason (e.g. `controller.abort(new Error("stop"))`) is
 * still recognised; a TimeoutError reason counts as a timeout.
 */
export function classifyModelError(err: unknown, options: { signal?: AbortSignal } = {}): ModelErrorClass {
  if (options.signal?.aborted) return errorName(options.signal.reason) === "TimeoutError" ? "timeout" : "aborted";
  return classify(err, 0);
}

function classify(err: unknown, depth: number): ModelErrorClass {
  if (err === undefined || err === null || depth > MAX_DEPTH) return "unknown";
  if (RetryError.isInstance(err) && err.reason === "abort") return "aborted";
  const name = errorName(err);
  if (name === "AbortError" || name === "ResponseAborted") return "aborted";
  if (name === "TimeoutError") return "timeout";
  const status = statusOf(err);
  if (status === 429) return "rate_limit";
  if (status === 408 || status === 504) return "timeout";
  const nested = inner(err);
  if (nested !== undefined && nested !== err) {
    const cls = classify(nested, depth + 1);
    if (cls !== "unknown") return cls;
  }
  // streamText's NoOutputGeneratedError carries no cause: the real error went to onError.
  if (NoOutputGeneratedError.isInstance(err)) return "unknown";
  if (APICallError.isInstance(err) || RetryError.isInstance(err)) return "provider";
  // Other AI SDK errors (bad response data, empty body) are the provider misbehaving.
  if (err && typeof err === "object" && Symbol.for("vercel.ai.error") in err) return "provider";
  return "unknown";
}

/**
 * `await streamText(...).text` rejects with a bare NoOutputGeneratedError; the model's actual
 * error is only reported to `onError`. Pass `tracker.onError` to streamText, then classify
 * `tracker.error(thrown)` (the first model error seen, else what was thrown).
 */
export function trackModelErrors(): { onError: (event: { error: unknown }) => void; error: (thrown?: unknown) => unknown } {
  let first: unknown;
  let seen = false;
  return {
    onError: ({ error }) => {
      if (!seen) {
        seen = true;
        first = error;
      }
    },
    error: (thrown) => (seen ? first : thrown),
  };
}

function findApiCallError(err: unknown, depth = 0): APICallError | undefined {
  if (err === undefined || err === null || depth > MAX_DEPTH) return undefined;
  if (APICallError.isInstance(err) && err.responseHeaders) return err;
  if (RetryError.isInstance(err)) {
    // The latest attempt's header is the freshest advice.
    for (let i = err.errors.length - 1; i >= 0; i--) {
      const found = findApiCallError(err.errors[i], depth + 1);
      if (found) return found;
    }
    return undefined;
  }
  const nested = inner(err);
  return nested !== err ? findApiCallError(nested, depth + 1) : undefined;
}

/**
 * How long the provider asked us to wait, from `retry-after-ms` (milliseconds) or `retry-after`
 * (seconds or an HTTP date), else a Gemini 429's RetryInfo. Undefined when the error carries no
 * such advice.
 */
export function retryAfterMs(err: unknown, now: number = Date.now()): number | undefined {
  const apiError = findApiCallError(err);
  if (!apiError) return undefined;
  return retryAfterFromHeaders(apiError.responseHeaders, now) ?? geminiRetryDelayMs(apiError.responseBody);
}
