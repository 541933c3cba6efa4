/**
 * An account's rate limits as the providers document them, for the fakes (fake-openai.ts,
 * fake-anthropic.ts): each limit is a bucket holding one second's share of its per-minute
 * limit, refilled continuously; a request is admitted only when every bucket holds its cost, and
 * a rejected request still takes one from the requests bucket (OpenAI: "unsuccessful requests
 * contribute to your per-minute limit"), down to one second's debt. Every answer carries the
 * state in the provider's headers; a rejection is a 429 with the provider's retry advice.
 * `draw()` stands for a second program on the same key.
 */

export type AccountKind = "requests" | "tokens" | "input_tokens" | "output_tokens";

export interface AccountLimitsOptions {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  inputTokensPerMinute?: number;
  outputTokensPerMinute?: number;
}

class Bucket {
  readonly capacity: number;
  private readonly perMs: number;
  level: number;
  private at = performance.now();

  constructor(readonly perMinute: number) {
    this.capacity = perMinute / 60;
    this.perMs = perMinute / 60_000;
    this.level = this.capacity;
  }

  refill(now: number): void {
    this.level = Math.min(this.capacity, this.level + (now - this.at) * this.perMs);
    this.at = now;
  }

  /** Milliseconds until the bucket holds `n` (a cost above capacity waits for a full bucket). */
  msUntil(n: number): number {
    const need = Math.min(n, this.capacity);
    return this.level >= need ? 0 : (need - this.level) / this.perMs;
  }

  /** Milliseconds until the bucket is full again (the providers' "reset"). */
  resetMs(): number {
    return (this.capacity - this.level) / this.perMs;
  }

  take(n: number): void {
    this.level = Math.max(-this.capacity, this.level - n);
  }
}

export interface Admission {
  ok: boolean;
  /** When the request could have been admitted, for the 429's advice. */
  retryAfterMs: number;
  state: Partial<Record<AccountKind, { limit: number; remaining: number; resetMs: number }>>;
}

export class FakeAccount {
  private readonly buckets: Partial<Record<AccountKind, Bucket>> = {};
  accepted = 0;
  rejected = 0;

  constructor(options: AccountLimitsOptions) {
    if (options.requestsPerMinute) this.buckets.requests = new Bucket(options.requestsPerMinute);
    if (options.tokensPerMinute) this.buckets.tokens = new Bucket(options.tokensPerMinute);
    if (options.inputTokensPerMinute) this.buckets.input_tokens = new Bucket(options.inputTokensPerMinute);
    if (options.outputTokensPerMinute) this.buckets.output_tokens = new Bucket(options.outputTokensPerMinute);
  }

  /** Admits (or rejects) one request of `input` prompt tokens and `output` completion tokens. */
  admit(cost: { input: number; output: number }): Admission {
    const now = performance.now();
    const costs: Record<AccountKind, number> = {
      requests: 1,
      tokens: cost.input + cost.output,
      input_tokens: cost.input,
      output_tokens: cost.output,
    };
    let wait = 0;
    for (const [kind, b] of Object.entries(this.buckets) as [AccountKind, Bucket][]) {
      b.refill(now);
      wait = Math.max(wait, b.msUntil(costs[kind]));
    }
    const ok = wait === 0;
    if (ok) {
      for (const [kind, b] of Object.entries(this.buckets) as [AccountKind, Bucket][]) b.take(costs[kind]);
      this.accepted++;
    } else {
      this.buckets.requests?.take(1);
      this.rejected++;
      wait = Math.max(wait, this.buckets.requests?.msUntil(1) ?? 0);
    }
    const state: Admission["state"] = {};
    for (const [kind, b] of Object.entries(this.buckets) as [AccountKind, Bucket][])
      state[kind] = { limit: b.perMinute, remaining: Math.max(0, Math.floor(b.level)), resetMs: b.resetMs() };
    return { ok, retryAfterMs: Math.ceil(wait), state };
  }

  /** Another program on the same key takes `n` requests' worth now (rejected ones count too). */
  draw(cost: { input: number; output: number } = { input: 0, output: 0 }): boolean {
    return this.admit(cost).ok;
  }
}

/** A duration the way OpenAI writes its resets: `12ms`, `1.5s`, `6m0s`. */
export function openAIDuration(ms: number): string {
  if (ms < 1_000) return `${Math.max(0, Math.round(ms))}ms`;
  if (ms < 60_000) return `${Number((ms / 1000).toFixed(3))}s`;
  const m = Math.floor(ms / 60_000);
  return `${m}m${Number(((ms - m * 60_000) / 1000).toFixed(3))}s`;
}

/** OpenAI's `x-ratelimit-*` headers (requests and tokens) for an admission. */
export function openAIHeaders(a: Admission): Record<string, string> {
  const out: Record<string, string> = {};
  for (const kind of ["requests", "tokens"] as const) {
    const s = a.state[kind];
    if (!s) continue;
    out[`x-ratelimit-limit-${kind}`] = String(s.limit);
    out[`x-ratelimit-remaining-${kind}`] = String(s.remaining);
    out[`x-ratelimit-reset-${kind}`] = openAIDuration(s.resetMs);
  }
  if (!a.ok) out["retry-after-ms"] = String(a.retryAfterMs);
  return out;
}

/** Anthropic's `anthropic-ratelimit-*` headers (resets as RFC 3339 instants) and `retry-after` in seconds. */
export function anthropicHeaders(a: Admission): Record<string, string> {
  const out: Record<string, string> = {};
  const names: Record<AccountKind, string> = {
    requests: "requests",
    tokens: "tokens",
    input_tokens: "input-tokens",
    output_tokens: "output-tokens",
  };
  for (const [kind, s] of Object.entries(a.state) as [AccountKind, { limit: number; remaining: number; resetMs: number }][]) {
    out[`anthropic-ratelimit-${names[kind]}-limit`] = String(s.limit);
    out[`anthropic-ratelimit-${names[kind]}-remaining`] = String(s.remaining);
    out[`anthropic-ratelimit-${names[kind]}-reset`] = new Date(Date.now() + s.resetMs).toISOString();
  }
  if (!a.ok) out["retry-after"] = String(Math.max(1, Math.ceil(a.retryAfterMs / 1000)));
  return out;
}
