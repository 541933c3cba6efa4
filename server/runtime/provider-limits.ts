/**
 * What a provider's answer says about its account's rate limits, read from its own headers
 * (pure; the shared limiter in ./rate-limit.ts acts on it):
 *
 * - OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, the reset a duration such
 *   as `6m0s`, `1.5s` or `12ms` (the time until the bucket is full again).
 * - Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
 *   the reset an RFC 3339 instant; `retry-after` on a 429.
 * - Gemini sends no limits, only a 429 whose body carries `google.rpc.RetryInfo { retryDelay: "30s" }`.
 *
 * Headers are untrusted input: a value that does not parse, a limit of 0, a reset beyond
 * MAX_RESET_MS or `remaining` above `limit` (then the limit is dropped too) is dropped and named in `problems`
 * (the limiter logs each problem once), so no header can stop calls or park an endpoint.
 */

/** Per-minute windows refill within a minute: a longer reset is not a per-minute limit's. */
export const MAX_RESET_MS = 60_000;
/** Above any real account's per-minute limit; a bigger number is garbage. */
const MAX_LIMIT = 1e9;

export type LimitKind = "requests" | "tokens" | "input_tokens" | "output_tokens";
export const LIMIT_KINDS: readonly LimitKind[] = ["requests", "tokens", "input_tokens", "output_tokens"];

export interface LimitState {
  /** Per minute. */
  limit: number;
  /** What the bucket still holds, when the header said so (clamped to 0..limit). */
  remaining?: number;
  /** Milliseconds until the bucket is full again, when the header said so (0..MAX_RESET_MS). */
  resetMs?: number;
}

export interface ProviderLimits {
  limits: Partial<Record<LimitKind, LimitState>>;
  /** A 429's advice: `retry-after-ms`, `retry-after` (seconds or HTTP date), capped by the caller. */
  retryAfterMs?: number;
  /** What was dropped or clamped, e.g. "x-ratelimit-limit-requests: not a positive number". */
  problems: string[];
}

type Headers = Record<string, string | undefined> | undefined;

function lower(headers: Headers): Map<string, string> {
  const out = new Map<string, string>();
  for (const [k, v] of Object.entries(headers ?? {})) if (typeof v === "string") out.set(k.toLowerCase(), v.trim());
  return out;
}

const UNIT_MS: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1, us: 0.001, "µs": 0.001, ns: 0.000001 };

/** A Go-style duration (`6m0s`, `1.5s`, `12ms`, `1h2m3s`) or a bare number of seconds, in ms. */
export function parseDurationMs(text: string): number | undefined {
  const s = text.trim();
  if (s.length === 0 || s.length > 40) return undefined;
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s) * 1000;
  if (!/^(\d+(\.\d+)?(h|ms|m|s|us|µs|ns))+$/.test(s)) return undefined;
  let ms = 0;
  for (const m of s.matchAll(/(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/g)) ms += Number(m[1]) * (UNIT_MS[m[2] as string] as number);
  return Number.isFinite(ms) ? ms : undefined;
}

function parseCount(text: string | undefined): number | undefined {
  if (text === undefined || !/^\d+(\.\d+)?$/.test(text)) return undefined;
  const n = Number(text);
  return Number.isFinite(n) ? n : undefined;
}

/** A reset: a duration (OpenAI), or an RFC 3339 instant (Anthropic), from `now`. */
function parseReset(text: string, now: number): number | undefined {
  const duration = parseDurationMs(text);
  if (duration !== undefined) return duration;
  if (!/^\d{4}-\d{2}-\d{2}T/.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** retry-after-ms, else retry-after (seconds or an HTTP date), in ms. */
export function retryAfterFromHeaders(headers: Headers, now: number = Date.now()): number | undefined {
  const h = lower(headers);
  const ms = parseCount(h.get("retry-after-ms"));
  if (ms !== undefined) return Math.ceil(ms);
  const after = h.get("retry-after");
  if (!after) return undefined;
  const seconds = parseCount(after);
  if (seconds !== undefined) return Math.ceil(seconds * 1000);
  const date = Date.parse(after);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

const OPENAI: Partial<Record<LimitKind, string>> = { requests: "requests", tokens: "tokens" };
const ANTHROPIC: Record<LimitKind, string> = {
  requests: "requests",
  tokens: "tokens",
  input_tokens: "input-tokens",
  output_tokens: "output-tokens",
};

/** The rate-limit state an answer's headers describe (any provider; unknown headers are ignored). */
export function parseProviderLimits(headers: Headers, now: number = Date.now()): ProviderLimits {
  const h = lower(headers);
  const out: ProviderLimits = { limits: {}, problems: [] };
  const read = (kind: LimitKind, names: { limit: string; remaining: string; reset: string }) => {
    const rawLimit = h.get(names.limit);
    if (rawLimit === undefined) return;
    const limit = parseCount(rawLimit);
    if (limit === undefined || limit <= 0 || limit > MAX_LIMIT) {
      out.problems.push(`${names.limit}: ${JSON.stringify(rawLimit.slice(0, 40))} is not a usable limit`);
      return;
    }
    const state: LimitState = { limit };
    const rawRemaining = h.get(names.remaining);
    if (rawRemaining !== undefined) {
      const remaining = parseCount(rawRemaining);
      if (remaining === undefined) out.problems.push(`${names.remaining}: ${JSON.stringify(rawRemaining.slice(0, 40))} does not parse`);
      else if (remaining > limit) {
        // A bucket cannot hold more than its limit: the limit itself is not to be trusted.
        out.problems.push(`${names.remaining}: ${remaining} is above the limit ${limit}`);
        return;
      } else state.remaining = remaining;
    }
    const rawReset = h.get(names.reset);
    if (rawReset !== undefined) {
      const resetMs = parseReset(rawReset, now);
      if (resetMs === undefined) out.problems.push(`${names.reset}: ${JSON.stringify(rawReset.slice(0, 40))} does not parse`);
      else if (resetMs > MAX_RESET_MS) out.problems.push(`${names.reset}: ${Math.round(resetMs / 1000)} s away is beyond a minute`);
      else state.resetMs = resetMs;
    }
    out.limits[kind] = state;
  };
  for (const kind of LIMIT_KINDS) {
    const openai = OPENAI[kind];
    if (openai)
      read(kind, {
        limit: `x-ratelimit-limit-${openai}`,
        remaining: `x-ratelimit-remaining-${openai}`,
        reset: `x-ratelimit-reset-${openai}`,
      });
    const a = ANTHROPIC[kind];
    if (!out.limits[kind])
      read(kind, {
        limit: `anthropic-ratelimit-${a}-limit`,
        remaining: `anthropic-ratelimit-${a}-remaining`,
        reset: `anthropic-ratelimit-${a}-reset`,
      });
  }
  const retry = retryAfterFromHeaders(headers, now);
  if (retry !== undefined) out.retryAfterMs = retry;
  return out;
}

/** Gemini's 429 body: `error.details[]` with `@type` …RetryInfo and `retryDelay` ("30s"), in ms. */
export function geminiRetryDelayMs(body: unknown): number | undefined {
  let parsed = body;
  if (typeof body === "string") {
    if (body.length > 100_000) return undefined;
    try {
      parsed = JSON.parse(body);
    } catch {
      return undefined;
    }
  }
  const details = (parsed as { error?: { details?: unknown } } | null)?.error?.details;
  if (!Array.isArray(details)) return undefined;
  for (const d of details) {
    if (!d || typeof d !== "object") continue;
    const { "@type": type, retryDelay } = d as { "@type"?: unknown; retryDelay?: unknown };
    if (typeof type === "string" && type.endsWith("google.rpc.RetryInfo") && typeof retryDelay === "string")
      return parseDurationMs(retryDelay);
  }
  return undefined;
}

/** How long the bucket takes to refill from empty (its capacity in time: 1 s for a bucket of one second's share). */
export function bucketSpanMs(state: LimitState): number | undefined {
  if (state.remaining === undefined || state.resetMs === undefined) return undefined;
  const capacity = Math.min(state.limit, Math.max(1, state.remaining + (state.resetMs / 60_000) * state.limit));
  return (capacity / state.limit) * 60_000;
}

/**
 * How full the bucket was (0..1) before the answer's own request took `own` from it, from one
 * kind's limit, remaining and reset: the bucket refills at limit/min, so it holds remaining +
 * reset × limit/min when full. Undefined without both.
 */
export function bucketFullness(state: LimitState, own = 0): number | undefined {
  if (state.remaining === undefined || state.resetMs === undefined) return undefined;
  const capacity = Math.min(state.limit, Math.max(1, state.remaining + (state.resetMs / 60_000) * state.limit));
  return Math.min(1, (state.remaining + own) / capacity);
}
