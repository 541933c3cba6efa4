import { APICallError, type LanguageModelV3, type LanguageModelV3Middleware, type LanguageModelV3Prompt, type LanguageModelV3StreamPart, type LanguageModelV3Usage } from "@ai-sdk/provider";
import { sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import { getConfig } from "@/server/config/load";
import { drizzle } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import type { Db } from "@/server/db/client";
import * as schema from "@/server/db/schema";
import { log } from "@/server/log";
import { observeModelCall, observeRateLimitWait } from "@/server/instruments";
import { classifyModelError, retryAfterMs } from "@/server/runtime/model-errors";

/**
 * Provider-wide rate limits shared by every process (web and any number of workers, on any
 * number of machines) through one PostgreSQL row per model endpoint.
 *
 * The budget is a virtual schedule (the generic cell-rate algorithm): the row holds the instant
 * from which the next request may start. A call reserves its start in ONE atomic
 * `UPDATE ... RETURNING` that computes from PostgreSQL's `now()`:
 *
 *   start            = greatest(next_request_at, next_token_at, slow_until, now())
 *   next_request_at := start + 60 s / requests_per_minute
 *   next_token_at   := start + estimated_tokens × 60 s / tokens_per_minute
 *
 * and then sleeps until `start` (abortable, bounded). Requests are therefore spaced evenly at the
 * configured rate however many processes draw from the budget — no burst can overshoot it. After
 * the call, the token schedule is corrected by (actual − estimated) tokens. A provider 429 moves
 * `slow_until` to now() + retry-after, so every process holds back on that endpoint.
 *
 * If the database cannot be reached the limiter fails open (logs, lets the call proceed): a
 * database restart must not fail model calls that would otherwise succeed.
 */

export interface RateLimitSettings {
  requestsPerMinute: number;
  tokensPerMinute: number;
  /** A call whose reserved start would be further away than this fails as a rate limit instead. */
  maxWaitMs: number;
  /** Back-off applied on a 429 that carries no retry-after. */
  defaultRetryAfterMs: number;
  /** Cap on a provider's retry-after (a broken header must not park an endpoint for a day). */
  maxRetryAfterMs: number;
}

export const DEFAULT_MAX_WAIT_MS = 120_000;

/** A catalog entry's own budget (models[].requests_per_minute / tokens_per_minute), when it sets one. */
export interface EndpointBudget {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
}

/** The budget of one endpoint: the catalog entry's numbers, falling back to rate_limits.*. */
export function rateLimitSettingsFromConfig(config: FlotillaConfig, budget: EndpointBudget = {}): RateLimitSettings {
  return {
    requestsPerMinute: budget.requestsPerMinute ?? config.rate_limits.requests_per_minute,
    tokensPerMinute: budget.tokensPerMinute ?? config.rate_limits.tokens_per_minute,
    maxWaitMs: DEFAULT_MAX_WAIT_MS,
    defaultRetryAfterMs: 1_000,
    maxRetryAfterMs: 600_000,
  };
}

/**
 * The shared budget had no slot within `maxWaitMs`. It is an APICallError with status 429 and a
 * `retry-after-ms` header, so classifyModelError says "rate_limit" and retryAfterMs says when —
 * a batch item is deferred exactly like on a provider 429, and the AI SDK does not retry it.
 */
export function sharedBudgetExhausted(endpoint: string, waitMs: number): APICallError {
  noteBackoff(endpoint, waitMs);
  return new APICallError({
    message: `Shared rate-limit budget for ${endpoint} is exhausted for the next ${Math.ceil(waitMs / 1000)} s (rate_limits.requests_per_minute / tokens_per_minute)`,
    url: `flotilla-rate-limit:${endpoint}`,
    requestBodyValues: {},
    statusCode: 429,
    responseHeaders: { "retry-after-ms": String(Math.ceil(waitMs)) },
    isRetryable: false,
  });
}

export interface Reservation {
  /** Milliseconds waited before the call could start. */
  waitedMs: number;
  /** Tokens debited up front (estimate); corrected with settle(). */
  estimatedTokens: number;
  /** False when the limiter was off or failed open: nothing to correct. */
  counted: boolean;
  /** The reserved start on PostgreSQL's clock (epoch ms), when counted. */
  startAtMs?: number;
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (ms <= 0) return signal?.aborted ? Promise.reject(signal.reason) : Promise.resolve();
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

type Rows<T> = T[];

export class SharedRateLimiter {
  private readonly ensured = new Set<string>();
  /** Off mode only: slow_until per endpoint as known locally, refreshed at most once a second. */
  private readonly slowCache = new Map<string, { untilMs: number; checkedAt: number; pending?: Promise<void> }>();

  constructor(
    private readonly settings: RateLimitSettings,
    private readonly dbProvider: () => Db | undefined,
  ) {}

  get enabled(): boolean {
    return this.settings.requestsPerMinute > 0 || this.settings.tokensPerMinute > 0;
  }

  private get requestIntervalMs(): number {
    return this.settings.requestsPerMinute > 0 ? 60_000 / this.settings.requestsPerMinute : 0;
  }

  private get msPerToken(): number {
    return this.settings.tokensPerMinute > 0 ? 60_000 / this.settings.tokensPerMinute : 0;
  }

  private async ensureRow(db: Db, endpoint: string): Promise<void> {
    if (this.ensured.has(endpoint)) return;
    await db.execute(sql`insert into model_rate_limits (endpoint) values (${endpoint}) on conflict (endpoint) do nothing`);
    this.ensured.add(endpoint);
  }

  /**
   * Reserves the next start on `endpoint` and sleeps until it. Throws the abort reason when
   * `signal` aborts while waiting, or a 429-classified error when the wait would exceed maxWaitMs.
   */
  async acquire(endpoint: string, options: { estimatedTokens?: number; signal?: AbortSignal } = {}): Promise<Reservation> {
    // Tokens are only accounted (and corrected later) when a tokens-per-minute budget is set.
    const estimatedTokens = this.msPerToken > 0 ? Math.max(0, Math.round(options.estimatedTokens ?? 0)) : 0;
    const db = this.dbProvider();
    if (!this.enabled || !db) {
      await this.waitForSlowdown(endpoint, db, options.signal);
      return { waitedMs: 0, estimatedTokens: 0, counted: false };
    }
    const reqMs = this.requestIntervalMs;
    const tokMs = estimatedTokens * this.msPerToken;
    const maxWait = this.settings.maxWaitMs;
    let waitMs: number;
    let startAtMs: number;
    try {
      await this.ensureRow(db, endpoint);
      // All SET expressions see the old row, so `start` is computed identically in each.
      const rows = (await db.execute(sql`
        update model_rate_limits set
          next_request_at = greatest(next_request_at, next_token_at, slow_until, now()) + make_interval(secs => ${reqMs / 1000}::float8),
          next_token_at = greatest(next_request_at, next_token_at, slow_until, now()) + make_interval(secs => ${tokMs / 1000}::float8),
          requests = requests + 1,
          tokens = tokens + ${estimatedTokens},
          updated_at = now()
        where endpoint = ${endpoint}
          and greatest(next_request_at, next_token_at, slow_until, now()) <= now() + make_interval(secs => ${maxWait / 1000}::float8)
        returning extract(epoch from next_request_at) * 1000 - ${reqMs}::float8 as start_ms,
                  extract(epoch from now()) * 1000 as now_ms`)) as unknown as Rows<{
        start_ms: number | string;
        now_ms: number | string;
      }>;
      if (rows.length === 0) {
        const [row] = (await db.execute(sql`
          select extract(epoch from (greatest(next_request_at, next_token_at, slow_until, now()) - now())) * 1000 as wait_ms
          from model_rate_limits where endpoint = ${endpoint}`)) as unknown as Rows<{ wait_ms: number | string }>;
        if (!row) {
          this.ensured.delete(endpoint); // row removed by an operator: recreate on the next call
          return { waitedMs: 0, estimatedTokens: 0, counted: false };
        }
        throw sharedBudgetExhausted(endpoint, Number(row.wait_ms));
      }
      startAtMs = Number(rows[0]?.start_ms);
      waitMs = Math.max(0, startAtMs - Number(rows[0]?.now_ms));
    } catch (err) {
      if (APICallError.isInstance(err)) throw err;
      log.warn({ endpoint, err }, "rate limiter: database unavailable, letting the call through");
      return { waitedMs: 0, estimatedTokens: 0, counted: false };
    }
    observeRateLimitWait(endpoint, waitMs / 1000);
    await abortableSleep(waitMs, options.signal);
    return { waitedMs: waitMs, estimatedTokens, counted: true, startAtMs };
  }

  /** Corrects the token schedule once the provider reported real usage. */
  async settle(endpoint: string, reservation: Reservation, actualTokens: number | undefined): Promise<void> {
    if (!reservation.counted || this.msPerToken === 0 || actualTokens === undefined) return;
    const delta = Math.round(actualTokens) - reservation.estimatedTokens;
    if (delta === 0) return;
    const db = this.dbProvider();
    if (!db) return;
    try {
      await db.execute(sql`
        update model_rate_limits set
          next_token_at = next_token_at + make_interval(secs => ${(delta * this.msPerToken) / 1000}::float8),
          tokens = tokens + ${delta},
          updated_at = now()
        where endpoint = ${endpoint}`);
    } catch (err) {
      log.warn({ endpoint, err }, "rate limiter: could not settle token usage");
    }
  }

  /** A provider said 429: no process starts a call on `endpoint` before now() + retry-after. */
  async recordRateLimited(endpoint: string, retryAfter: number | undefined): Promise<void> {
    const ms = Math.min(this.settings.maxRetryAfterMs, Math.max(0, retryAfter ?? this.settings.defaultRetryAfterMs));
    const local = this.slowCache.get(endpoint);
    const untilMs = Date.now() + ms;
    noteBackoff(endpoint, ms);
    if (local) local.untilMs = Math.max(local.untilMs, untilMs);
    else this.slowCache.set(endpoint, { untilMs, checkedAt: Date.now() });
    const db = this.dbProvider();
    if (!db) return;
    try {
      await this.ensureRow(db, endpoint);
      await db.execute(sql`
        update model_rate_limits set
          slow_until = greatest(slow_until, now() + make_interval(secs => ${ms / 1000}::float8)),
          rate_limited = rate_limited + 1,
          last_rate_limited_at = now(),
          updated_at = now()
        where endpoint = ${endpoint}`);
    } catch (err) {
      log.warn({ endpoint, err }, "rate limiter: could not record a 429");
    }
  }

  /** Budgets off: still honour another process's 429 back-off (read at most once a second). */
  private async waitForSlowdown(endpoint: string, db: Db | undefined, signal?: AbortSignal): Promise<void> {
    let entry = this.slowCache.get(endpoint);
    if (!entry) {
      entry = { untilMs: 0, checkedAt: 0 };
      this.slowCache.set(endpoint, entry);
    }
    if (db && Date.now() - entry.checkedAt >= 1_000) {
      const e = entry;
      e.pending ??= (async () => {
        try {
          const [row] = (await db.execute(sql`
            select greatest(0, extract(epoch from (slow_until - now())) * 1000) as ms
            from model_rate_limits where endpoint = ${endpoint}`)) as unknown as Rows<{ ms: number | string | null }>;
          const ms = Number(row?.ms ?? 0);
          if (ms > 0) e.untilMs = Math.max(e.untilMs, Date.now() + ms);
        } catch {
          // fail open: a database restart must not block model calls
        } finally {
          e.checkedAt = Date.now();
          e.pending = undefined;
        }
      })();
      await e.pending;
    }
    const waitMs = entry.untilMs - Date.now();
    if (waitMs > this.settings.maxWaitMs) throw sharedBudgetExhausted(endpoint, waitMs);
    if (waitMs > 0) {
      observeRateLimitWait(endpoint, waitMs / 1000);
      await abortableSleep(waitMs, signal);
    }
  }
}

// ---- back-off hints for deferral ----------------------------------------------------------

const globalBackoff = globalThis as unknown as { __flotillaEndpointBackoff?: Map<string, number> };

function noteBackoff(endpoint: string, ms: number): void {
  globalBackoff.__flotillaEndpointBackoff ??= new Map();
  const map = globalBackoff.__flotillaEndpointBackoff;
  map.set(endpoint, Math.max(map.get(endpoint) ?? 0, Date.now() + ms));
}

/**
 * How long this process was last told to hold back on the model's endpoint (a provider 429's
 * retry-after, or the wait the shared budget refused), from now; undefined when nothing is
 * pending. The batch worker defers a rate-limited item by this much.
 */
export function endpointBackoffMs(model: LanguageModelV3 | string): number | undefined {
  const endpoint = typeof model === "string" ? model : endpointKey(model);
  const until = globalBackoff.__flotillaEndpointBackoff?.get(endpoint);
  if (until === undefined) return undefined;
  const ms = until - Date.now();
  return ms > 0 ? ms : undefined;
}

// ---- process wiring --------------------------------------------------------------------------

const globalForLimiter = globalThis as unknown as {
  __flotillaRateLimitDb?: Db;
  __flotillaRateLimiters?: Map<string, SharedRateLimiter>;
};

/** Overrides the limiter's database handle (tests); by default it opens its own small pool. */
export function setRateLimitDatabase(db: Db | undefined): void {
  globalForLimiter.__flotillaRateLimitDb = db;
}

/**
 * The limiter's own pool on DATABASE_URL. Its connections commit asynchronously
 * (synchronous_commit=off): every process updates the same hot row around every model call, and
 * waiting for a WAL flush while holding that row's lock would serialise all calls on disk
 * latency. A crash can at worst forget the last few milliseconds of reservations, which only
 * makes the budget briefly more generous — never corrupts anything else.
 */
function processDb(): Db | undefined {
  if (globalForLimiter.__flotillaRateLimitDb) return globalForLimiter.__flotillaRateLimitDb;
  const url = process.env.DATABASE_URL;
  if (!url) return undefined;
  const client = postgres(url, {
    max: 4,
    onnotice: () => {},
    connection: { application_name: "flotilla-ratelimit", synchronous_commit: "off" },
  });
  globalForLimiter.__flotillaRateLimitDb = drizzle(client, { schema });
  return globalForLimiter.__flotillaRateLimitDb;
}

/** The limiter for a configuration and endpoint budget (one per distinct budget per process). */
export function getRateLimiter(config: FlotillaConfig = getConfig(), budget: EndpointBudget = {}): SharedRateLimiter {
  const settings = rateLimitSettingsFromConfig(config, budget);
  const key = JSON.stringify(settings);
  globalForLimiter.__flotillaRateLimiters ??= new Map();
  let limiter = globalForLimiter.__flotillaRateLimiters.get(key);
  if (!limiter) {
    limiter = new SharedRateLimiter(settings, processDb);
    globalForLimiter.__flotillaRateLimiters.set(key, limiter);
  }
  return limiter;
}

// ---- AI SDK middleware -----------------------------------------------------------------------

/** Endpoint key of a model without a catalog entry: provider and model id (e.g. "openai-compatible.chat:gpt-4o-mini"). */
export function endpointKey(model: LanguageModelV3): string {
  return `${model.provider}:${model.modelId}`;
}

/**
 * Endpoint key of a catalog entry: base URL and model id, so two entries that reach the same
 * model on the same server share one budget, and the same model id on two servers does not.
 */
export function catalogEndpointKey(entry: { baseURL?: string; model: string }): string {
  return `${entry.baseURL?.replace(/\/+$/, "") ?? "simulator"}|${entry.model}`;
}

/** Rough input size before the call (≈ 4 characters per token); corrected by settle() afterwards. */
export function estimatePromptTokens(prompt: LanguageModelV3Prompt): number {
  let chars = 0;
  for (const message of prompt) {
    if (typeof message.content === "string") {
      chars += message.content.length;
      continue;
    }
    for (const part of message.content) {
      if ("text" in part && typeof part.text === "string") chars += part.text.length;
      else if ("input" in part) chars += JSON.stringify(part.input ?? "").length;
      else if ("output" in part) chars += JSON.stringify(part.output ?? "").length;
    }
  }
  return Math.ceil(chars / 4);
}

function totalTokens(usage: LanguageModelV3Usage | undefined): { input?: number; output?: number; total?: number } {
  const input = usage?.inputTokens.total;
  const output = usage?.outputTokens.total;
  const total = input === undefined && output === undefined ? undefined : (input ?? 0) + (output ?? 0);
  return { input, output, total };
}

function outcomeOf(err: unknown): "error" | "rate_limited" | "aborted" {
  const cls = classifyModelError(err);
  return cls === "rate_limit" ? "rate_limited" : cls === "aborted" ? "aborted" : "error";
}

/**
 * Language-model middleware: waits for the shared budget, records a provider 429's retry-after
 * for every process, corrects the token schedule with real usage, and observes latency/tokens.
 * Installed once for every resolved model by server/models/index.ts.
 */
export function rateLimitMiddleware(
  options: { config?: FlotillaConfig; endpoint?: string; limiter?: SharedRateLimiter; budget?: EndpointBudget } = {},
): LanguageModelV3Middleware {
  const limiterFor = () => options.limiter ?? getRateLimiter(options.config ?? getConfig(), options.budget);

  const onError = async (limiter: SharedRateLimiter, endpoint: string, started: number, err: unknown) => {
    const outcome = outcomeOf(err);
    observeModelCall({ endpoint, outcome, seconds: (performance.now() - started) / 1000 });
    if (outcome === "rate_limited") await limiter.recordRateLimited(endpoint, retryAfterMs(err));
  };

  /** Waits for the shared budget of the call's endpoint; the clock starts once it is granted. */
  const reserve = async (params: { prompt: LanguageModelV3Prompt; abortSignal?: AbortSignal }, model: LanguageModelV3) => {
    const limiter = limiterFor();
    const endpoint = options.endpoint ?? endpointKey(model);
    const reservation = await limiter.acquire(endpoint, {
      estimatedTokens: estimatePromptTokens(params.prompt),
      signal: params.abortSignal,
    });
    return { limiter, endpoint, reservation, started: performance.now() };
  };

  /** A call that ended well: latency and tokens observed, the budget corrected with real usage. */
  const onSuccess = async (
    call: Awaited<ReturnType<typeof reserve>>,
    usage: LanguageModelV3Usage | undefined,
  ): Promise<void> => {
    const t = totalTokens(usage);
    observeModelCall({
      endpoint: call.endpoint,
      outcome: "ok",
      seconds: (performance.now() - call.started) / 1000,
      inputTokens: t.input,
      outputTokens: t.output,
    });
    await call.limiter.settle(call.endpoint, call.reservation, t.total);
  };

  return {
    specificationVersion: "v3",
    async wrapGenerate({ doGenerate, params, model }) {
      const call = await reserve(params, model);
      const { limiter, endpoint, started } = call;
      try {
        const result = await doGenerate();
        await onSuccess(call, result.usage);
        return result;
      } catch (err) {
        await onError(limiter, endpoint, started, err);
        throw err;
      }
    },
    async wrapStream({ doStream, params, model }) {
      const call = await reserve(params, model);
      const { limiter, endpoint, started } = call;
      let result: Awaited<ReturnType<typeof doStream>>;
      try {
        result = await doStream();
      } catch (err) {
        await onError(limiter, endpoint, started, err);
        throw err;
      }
      let usage: LanguageModelV3Usage | undefined;
      let failed: unknown;
      const observed = result.stream.pipeThrough(
        new TransformStream<LanguageModelV3StreamPart, LanguageModelV3StreamPart>({
          transform(part, controller) {
            if (part.type === "finish") usage = part.usage;
            else if (part.type === "error") failed = part.error;
            controller.enqueue(part);
          },
          async flush() {
            if (failed !== undefined) {
              await onError(limiter, endpoint, started, failed);
              return;
            }
            await onSuccess(call, usage);
          },
        }),
      );
      return { ...result, stream: observed };
    },
  };
}
