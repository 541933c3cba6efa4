import { AsyncLocalStorage } from "node:async_hooks";
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
import { bucketFullness, bucketSpanMs, LIMIT_KINDS, type LimitKind, type LimitState, parseProviderLimits } from "@/server/runtime/provider-limits";
import { abortable } from "./abortable";

/**
 * Provider-wide rate limits shared by every process (web and any number of workers, on any
 * number of machines) through one PostgreSQL row per model endpoint.
 *
 * The budget is a virtual schedule (the generic cell-rate algorithm): the row holds the instant
 * from which the next request may start. A call reserves its start in ONE atomic
 * `UPDATE ... RETURNING` that computes from PostgreSQL's `now()`:
 *
 *   start            = greatest(next_request_at, next_token_at − burst, slow_until, now())
 *   next_request_at := greatest(next_request_at, start) + 60 s / requests_per_minute
 *   next_token_at   := greatest(next_token_at, start) + estimated_tokens × 60 s / tokens_per_minute
 *
 * and then sleeps until `start` (abortable, bounded). Requests are therefore spaced evenly at the
 * configured rate however many processes draw from the budget; the token schedules of a real
 * provider (learned limits) may run BURST_MS ahead, drawing what its one-second bucket kept
 * (burst is 0 otherwise), so nothing overshoots the rate by more than that. After
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
  /** Cap on a provider's retry-after (a broken header must not park an endpoint for long). */
  maxRetryAfterMs: number;
  /** Pace at the limits the provider's own headers state (real providers; not the simulator). */
  learn?: boolean;
}

export const DEFAULT_MAX_WAIT_MS = 120_000;

/** A catalog entry's own budget (models[].requests_per_minute / tokens_per_minute), when it sets one. */
export interface EndpointBudget {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  /** The endpoint is a real provider whose headers state its limits. */
  learn?: boolean;
}

/** The budget of one endpoint: the catalog entry's numbers, falling back to rate_limits.*. */
export function rateLimitSettingsFromConfig(config: FlotillaConfig, budget: EndpointBudget = {}): RateLimitSettings {
  return {
    requestsPerMinute: budget.requestsPerMinute ?? config.rate_limits.requests_per_minute,
    tokensPerMinute: budget.tokensPerMinute ?? config.rate_limits.tokens_per_minute,
    maxWaitMs: DEFAULT_MAX_WAIT_MS,
    defaultRetryAfterMs: 1_000,
    // Per-minute limits free up within a minute; a longer retry-after is capped (and logged).
    maxRetryAfterMs: 60_000,
    learn: budget.learn ?? false,
  };
}

/**
 * A batch call reserves at most this far ahead of now; beyond it, it waits in its process's queue
 * and asks again. So the schedule never holds more than this much of a batch's backlog: a chat
 * turn (which reserves without the horizon) starts within about this long, and a share that
 * shrinks because another program drains the key takes effect within it.
 */
export const BACKGROUND_HORIZON_MS = 500;
/**
 * Output tokens a call is assumed to write until the endpoint's answers say what calls write (and
 * a batch estimate's assumption without a schema or max_output_tokens). Debited up front, it keeps
 * the first calls under a stated tokens limit; settle() hands back what was not used.
 */
export const ASSUMED_OUTPUT_TOKENS = 500;
/**
 * On an endpoint that learns from its headers (a real provider, whose bucket holds one second's
 * share of each per-minute limit), calls may start up to this far ahead of the token schedules
 * once they have fallen behind: what a pause, the probe's round trip or the first calls'
 * over-debited output left unused in the provider's bucket is drawn, instead of lost. Under half
 * the bucket: the rest is margin for jitter, estimates, and the round trip it takes to see another
 * program draining. It shrinks with the least share (another program seen draining the key), so
 * the schedule pays it back into the bucket then; recordAnswer discounts it from the fullness.
 */
export const BURST_MS = 400;
/**
 * The requests schedule has none: a request's cost is exact (nothing over-debited to hand back),
 * and a batch paces the requests bucket at its edge, where the whole bucket is the margin that
 * lets another program's drain be seen before it empties.
 */
const burstOf = (kind: LimitKind) => (kind === "requests" ? 0 : BURST_MS);
/** While nothing is known of an endpoint, one call goes first; the others wait this long at most for its answer. */
const PROBE_HOLD_MS = 5_000;
/**
 * Below this fullness of the provider's bucket (remaining against capacity, against what the
 * call's own burst is expected to have drawn) the pace shrinks in proportion.
 */
const FULLNESS_TARGET = 0.8;
/** The least share of a learned limit: a `remaining` of 0 slows the pace, never parks it. */
const MIN_SHARE = 0.1;
/**
 * A share falls at once to what the bucket's fullness says, but grows back by at most this much a
 * second: the provider's remaining is already ~1 s stale when it is read (latency, horizon), and
 * a share that springs back as fast as it fell empties a one-second bucket before it can see it.
 */
const SHARE_RISE_PER_SECOND = 0.15;
/** Learned values are written to the shared row at most this often per process unless they drop. */
const LEARN_WRITE_MS = 250;

/**
 * The shared budget had no slot within `maxWaitMs`. It is an APICallError with status 429 and a
 * `retry-after-ms` header, so classifyModelError says "rate_limit" and retryAfterMs says when —
 * a batch item is deferred exactly like on a provider 429, and the AI SDK does not retry it.
 */
export function sharedBudgetExhausted(endpoint: string, waitMs: number): APICallError {
  noteBackoff(endpoint, waitMs);
  return new APICallError({
    message: `Shared rate-limit budget for ${endpoint} is exhausted for the next ${Math.ceil(waitMs / 1000)} s (the provider's limit, or rate_limits.requests_per_minute / tokens_per_minute)`,
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
  /** Tokens debited up front (the prompt's estimate, or what calls used lately if more); corrected with settle(). */
  estimatedTokens: number;
  /** The same for the input and output schedules (providers that count them apart). */
  debitedInput?: number;
  debitedOutput?: number;
  /** False when the limiter was off or failed open: nothing to correct. */
  counted: boolean;
  /** The reserved start on PostgreSQL's clock (epoch ms), when counted. */
  startAtMs?: number;
  /** This call is the one that finds out whether the provider states its limits. */
  probe?: boolean;
  /** How far ahead of the schedule this call started (the burst in use, ms; see BURST_MS). */
  burstMs?: number;
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

// ---- who is calling: a batch's backlog queues behind the horizon, everyone else does not ------

const background = new AsyncLocalStorage<true>();

/**
 * Runs `fn` with its model calls marked as batch work: they reserve at most
 * BACKGROUND_HORIZON_MS ahead, so the lead's chat turns and task / swarm children (reserving
 * without the horizon) never queue behind a batch's whole backlog.
 */
export function asBatchWork<T>(fn: () => T): T {
  return background.run(true, fn);
}

const isBatchWork = () => background.getStore() === true;

// ---- what the provider's headers taught ------------------------------------------------------

/**
 * How full the provider's bucket was before the answer's own request (for requests: remaining +
 * 1, or a bucket of two reads empty half the time at our own pace), 1 when the answer does not
 * say; and the share of the bucket our own burst may have drawn: this call's (`ours`), or all of
 * BURST_MS (`oursMax`) while the burst is on — a call reserved while it was off can start after
 * calls that used it. The share of the limit is fixed in recordAnswer's update from these.
 */
function fullnessOf(state: LimitState | undefined, kind: LimitKind, burstMs = 0) {
  if (!state) return undefined;
  const fullness = bucketFullness(state, kind === "requests" ? 1 : 0);
  if (fullness === undefined) return { fullness: 1, ours: 0, oursMax: 0 };
  const span = bucketSpanMs(state);
  const frac = (ms: number) => (span ? Math.min(0.5, ms / span) : 0);
  const burst = burstOf(kind);
  return { fullness, ours: frac(Math.min(burstMs, burst)), oursMax: frac(burst) };
}

/** The share from a fullness: below FULLNESS_TARGET (our own burst's draw discounted) it shrinks in proportion. */
const shareFrom = (fullness: number, ours: number) => Math.max(MIN_SHARE, Math.min(1, (fullness + ours) / FULLNESS_TARGET));

const loggedProblems = new Set<string>();

/** Logs each kind of bad header once per endpoint and process (they repeat on every answer). */
function logProblems(endpoint: string, problems: string[]): void {
  for (const problem of problems) {
    const key = `${endpoint}\u0000${problem.split(":")[0]}`;
    if (loggedProblems.has(key)) continue;
    loggedProblems.add(key);
    log.warn({ endpoint, problem }, "rate limiter: ignoring a provider rate-limit header it cannot trust");
  }
}

interface Learned {
  limits: Record<LimitKind, number | null>;
  shares: Record<LimitKind, number | null>;
}

export class SharedRateLimiter {
  private readonly ensured = new Set<string>();
  /** Off mode only: slow_until per endpoint as known locally, refreshed at most once a second. */
  private readonly slowCache = new Map<string, { untilMs: number; checkedAt: number; pending?: Promise<void> }>();
  /** Batch calls held by the horizon wait here, one asking the database at a time per endpoint. */
  private readonly queues = new Map<string, { tail: Promise<void>; waiting: number }>();
  /** What this process last wrote of the learned limits, per endpoint. */
  private readonly written = new Map<string, Learned & { at: number }>();

  constructor(
    private readonly settings: RateLimitSettings,
    private readonly dbProvider: () => Db | undefined,
  ) {}

  get enabled(): boolean {
    return this.settings.requestsPerMinute > 0 || this.settings.tokensPerMinute > 0 || this.settings.learn === true;
  }

  private get statedRpm(): number | null {
    return this.settings.requestsPerMinute > 0 ? this.settings.requestsPerMinute : null;
  }

  private get statedTpm(): number | null {
    return this.settings.tokensPerMinute > 0 ? this.settings.tokensPerMinute : null;
  }

  private async ensureRow(db: Db, endpoint: string): Promise<void> {
    if (this.ensured.has(endpoint)) return;
    await db.execute(sql`insert into model_rate_limits (endpoint) values (${endpoint}) on conflict (endpoint) do nothing`);
    this.ensured.add(endpoint);
  }

  /**
   * Reserves the next start on `endpoint` and sleeps until it. Throws the abort reason when
   * `signal` aborts while waiting, or a 429-classified error when the wait would exceed maxWaitMs.
   * Batch work (asBatchWork) reserves at most BACKGROUND_HORIZON_MS ahead.
   */
  async acquire(
    endpoint: string,
    options: { estimatedTokens?: number; outputTokens?: number; signal?: AbortSignal; batch?: boolean } = {},
  ): Promise<Reservation> {
    const estimatedTokens = Math.max(0, Math.round(options.estimatedTokens ?? 0));
    const outputTokens = Math.max(0, Math.round(options.outputTokens ?? 0));
    const db = this.dbProvider();
    if (!this.enabled || !db) {
      await this.waitForSlowdown(endpoint, db, options.signal);
      return { waitedMs: 0, estimatedTokens: 0, counted: false };
    }
    const batch = options.batch ?? isBatchWork();
    let granted: Verdict | undefined;
    // A batch call joins its process's queue when one formed (first come, first served); any
    // other call asks at once.
    if (!batch || !(this.queues.get(endpoint)?.waiting ?? 0)) {
      granted = await this.reserve(db, endpoint, estimatedTokens, outputTokens, batch);
      if (granted.verdict === "exhausted") throw sharedBudgetExhausted(endpoint, granted.startMs - granted.nowMs);
    }
    if (granted?.verdict !== "ok" && granted?.verdict !== "fail_open")
      granted = await this.queued(db, endpoint, estimatedTokens, outputTokens, batch, granted, options.signal);
    if (granted.verdict === "fail_open") return { waitedMs: 0, estimatedTokens: 0, counted: false };
    const waitMs = Math.max(0, granted.startMs - granted.nowMs);
    observeRateLimitWait(endpoint, waitMs / 1000);
    await abortableSleep(waitMs, options.signal);
    return {
      waitedMs: waitMs,
      estimatedTokens: granted.debit.total,
      debitedInput: granted.debit.input,
      debitedOutput: granted.debit.output,
      counted: true,
      startAtMs: granted.startMs,
      probe: granted.probing,
      burstMs: granted.burstMs,
    };
  }

  /**
   * Waits in this process's queue for the endpoint; its head sleeps until the schedule is within
   * the horizon (or the probe answered) and asks again, until granted. Returns "ok" or "fail_open".
   */
  private async queued(
    db: Db,
    endpoint: string,
    estimatedTokens: number,
    outputTokens: number,
    batch: boolean,
    first: Verdict | undefined,
    signal?: AbortSignal,
  ): Promise<Verdict> {
    let q = this.queues.get(endpoint);
    if (!q) {
      q = { tail: Promise.resolve(), waiting: 0 };
      this.queues.set(endpoint, q);
    }
    const queue = q;
    const before = queue.tail;
    const ahead = queue.waiting;
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    queue.tail = before.then(() => mine);
    queue.waiting++;
    try {
      await abortable(before, signal);
      // After waiting behind others, the first answer is stale: ask again.
      let verdict = first && ahead === 0 ? first : await this.reserve(db, endpoint, estimatedTokens, outputTokens, batch);
      for (;;) {
        if (verdict.verdict === "ok" || verdict.verdict === "fail_open") return verdict;
        if (verdict.verdict === "exhausted") throw sharedBudgetExhausted(endpoint, verdict.startMs - verdict.nowMs);
        const wait = verdict.verdict === "probe" ? 50 : Math.max(5, verdict.startMs - verdict.nowMs - BACKGROUND_HORIZON_MS + 5);
        await abortableSleep(wait, signal);
        verdict = await this.reserve(db, endpoint, estimatedTokens, outputTokens, batch);
      }
    } finally {
      queue.waiting--;
      release();
    }
  }

  /** One atomic reservation attempt (see the header comment for the schedule). */
  private async reserve(db: Db, endpoint: string, estimatedTokens: number, outputTokens: number, batch: boolean): Promise<Verdict> {
    // With no limit stated, one call goes first: its answer tells the limits. A stated limit paces
    // from the first call; until an answer says what a call writes, each debits `outputTokens`.
    const probeFirst = this.settings.learn === true && this.statedRpm === null && this.statedTpm === null;
    const burstS = this.settings.learn === true ? BURST_MS / 1000 : 0;
    try {
      await this.ensureRow(db, endpoint);
      // The first CTE locks the row, and all after it read the row from there (a second scan of
      // the table would see the statement's snapshot: the row as it was before the lock was
      // granted). Each schedule advances from the later of its own position and the common start.
      const rows = (await db.execute(sql`
        with b as (
          select *,
                 greatest(next_request_at, next_token_at, next_input_token_at, next_output_token_at) as due,
                 -- The burst (BURST_MS, token schedules only) shrinks with the least share: while another
                 -- program drains the key, ours is paid back into the provider's bucket.
                 least(1, share_requests, share_tokens, share_input_tokens, share_output_tokens) as burst_share
            from model_rate_limits where endpoint = ${endpoint} for update
        ), c as (
          select b.endpoint,
                 greatest(next_request_at,
                          greatest(next_token_at, next_input_token_at, next_output_token_at) - make_interval(secs => ${burstS} * b.burst_share),
                          slow_until, now()) as start,
                 b.due,
                 coalesce(60000.0 / nullif(least(${this.statedRpm}::float8, learned_requests_per_minute * share_requests), 0), 0) as req_ms,
                 coalesce(60000.0 / nullif(least(${this.statedTpm}::float8, learned_tokens_per_minute * share_tokens), 0), 0) as tok_ms,
                 coalesce(60000.0 / nullif(learned_input_tokens_per_minute * share_input_tokens, 0), 0) as in_ms,
                 coalesce(60000.0 / nullif(learned_output_tokens_per_minute * share_output_tokens, 0), 0) as out_ms,
                 -- The prompt's estimate plus the output calls lately used (the caller's assumption
                 -- before any answer), or what calls lately used in all if more.
                 greatest(${estimatedTokens} + coalesce(output_tokens_per_call, ${outputTokens}), coalesce(tokens_per_call, 0)) as debit_total,
                 greatest(${estimatedTokens}, coalesce(input_tokens_per_call, 0)) as debit_input,
                 coalesce(output_tokens_per_call, ${outputTokens}) as debit_output,
                 (${probeFirst} and answered_at is null) as probing,
                 probe_at
            from b
        ), d as (
          select c.*, case
                   when probing and probe_at > now() - make_interval(secs => ${PROBE_HOLD_MS / 1000}) then 'probe'
                   when start > now() + make_interval(secs => ${this.settings.maxWaitMs / 1000}::float8) then 'exhausted'
                   when ${batch} and start > now() + make_interval(secs => ${BACKGROUND_HORIZON_MS / 1000}::float8) then 'hold'
                   else 'ok' end as verdict
            from c
        )
        update model_rate_limits m set
          next_request_at = case when d.verdict = 'ok' then greatest(m.next_request_at, d.start) + make_interval(secs => d.req_ms / 1000) else m.next_request_at end,
          next_token_at = case when d.verdict = 'ok' then greatest(m.next_token_at, d.start) + make_interval(secs => d.debit_total * d.tok_ms / 1000) else m.next_token_at end,
          next_input_token_at = case when d.verdict = 'ok' then greatest(m.next_input_token_at, d.start) + make_interval(secs => d.debit_input * d.in_ms / 1000) else m.next_input_token_at end,
          next_output_token_at = case when d.verdict = 'ok' then greatest(m.next_output_token_at, d.start) + make_interval(secs => d.debit_output * d.out_ms / 1000) else m.next_output_token_at end,
          requests = m.requests + (d.verdict = 'ok')::int,
          tokens = m.tokens + case when d.verdict = 'ok' then round(d.debit_total)::bigint else 0 end,
          probe_at = case when d.verdict = 'ok' and d.probing then now() else m.probe_at end,
          held_at = case when d.verdict = 'hold' then now() else m.held_at end,
          updated_at = case when d.verdict = 'ok' then now() else m.updated_at end
        from d where m.endpoint = d.endpoint
        returning d.verdict, d.probing, d.debit_total, d.debit_input, d.debit_output,
                  greatest(0, extract(epoch from d.due - d.start) * 1000) as burst_ms,
                  extract(epoch from d.start) * 1000 as start_ms,
                  extract(epoch from now()) * 1000 as now_ms`)) as unknown as Rows<{
        verdict: Verdict["verdict"];
        probing: boolean;
        debit_total: number | string;
        debit_input: number | string;
        debit_output: number | string;
        burst_ms: number | string;
        start_ms: number | string;
        now_ms: number | string;
      }>;
      const row = rows[0];
      if (!row) {
        this.ensured.delete(endpoint); // row removed by an operator: recreate on the next call
        return FAIL_OPEN;
      }
      return {
        verdict: row.verdict,
        probing: row.probing === true,
        startMs: Number(row.start_ms),
        nowMs: Number(row.now_ms),
        debit: { total: Number(row.debit_total), input: Number(row.debit_input), output: Number(row.debit_output) },
        burstMs: Number(row.burst_ms),
      };
    } catch (err) {
      log.warn({ endpoint, err }, "rate limiter: database unavailable, letting the call through");
      return FAIL_OPEN;
    }
  }

  /**
   * Corrects the token schedules once the provider reported real usage, and keeps the average
   * of what calls use (debited up front by the next reservations).
   */
  async settle(endpoint: string, reservation: Reservation, usage: { input?: number; output?: number } | undefined): Promise<void> {
    if (!reservation.counted || !usage || (usage.input === undefined && usage.output === undefined)) return;
    const input = Math.round(usage.input ?? 0);
    const output = Math.round(usage.output ?? 0);
    const deltaTotal = input + output - reservation.estimatedTokens;
    const deltaInput = input - (reservation.debitedInput ?? reservation.estimatedTokens);
    const deltaOutput = output - (reservation.debitedOutput ?? 0);
    const db = this.dbProvider();
    if (!db) return;
    try {
      await db.execute(sql`
        update model_rate_limits set
          next_token_at = next_token_at + make_interval(secs => ${deltaTotal} * coalesce(60.0 / nullif(least(${this.statedTpm}::float8, learned_tokens_per_minute * share_tokens), 0), 0)),
          next_input_token_at = next_input_token_at + make_interval(secs => ${deltaInput} * coalesce(60.0 / nullif(learned_input_tokens_per_minute * share_input_tokens, 0), 0)),
          next_output_token_at = next_output_token_at + make_interval(secs => ${deltaOutput} * coalesce(60.0 / nullif(learned_output_tokens_per_minute * share_output_tokens, 0), 0)),
          tokens = tokens + ${Math.round(deltaTotal)},
          tokens_per_call = coalesce(0.8 * tokens_per_call + 0.2 * ${input + output}, ${input + output}),
          input_tokens_per_call = coalesce(0.8 * input_tokens_per_call + 0.2 * ${input}, ${input}),
          output_tokens_per_call = coalesce(0.8 * output_tokens_per_call + 0.2 * ${output}, ${output}),
          updated_at = now()
        where endpoint = ${endpoint}`);
    } catch (err) {
      log.warn({ endpoint, err }, "rate limiter: could not settle token usage");
    }
  }

  /**
   * An answer came back (or failed with an HTTP answer): what its headers say of the account's
   * limits is written to the shared row — the limits per minute, and the share of them this key
   * may use from how full the provider's bucket still is. Written at most every LEARN_WRITE_MS
   * per process unless a limit changed or a share dropped; the probe's answer always.
   */
  async recordAnswer(endpoint: string, headers: Record<string, string | undefined> | undefined, reservation?: Reservation): Promise<void> {
    if (!this.settings.learn) return;
    const parsed = parseProviderLimits(headers);
    logProblems(endpoint, parsed.problems);
    const learned: Learned = { limits: {} as Learned["limits"], shares: {} as Learned["shares"] };
    const full = {} as Record<LimitKind, ReturnType<typeof fullnessOf> | null>;
    for (const kind of LIMIT_KINDS) {
      learned.limits[kind] = parsed.limits[kind]?.limit ?? null;
      const f = fullnessOf(parsed.limits[kind], kind, reservation?.burstMs);
      full[kind] = f ?? null;
      learned.shares[kind] = f ? shareFrom(f.fullness, f.ours) : null;
    }
    const now = Date.now();
    const last = this.written.get(endpoint);
    const due =
      reservation?.probe === true ||
      !last ||
      now - last.at >= LEARN_WRITE_MS ||
      LIMIT_KINDS.some(
        (k) =>
          learned.limits[k] !== last.limits[k] ||
          (learned.shares[k] ?? 1) < (last.shares[k] ?? 1) - 0.1,
      );
    if (!due) return;
    this.written.set(endpoint, { ...learned, at: now });
    const db = this.dbProvider();
    if (!db) return;
    const known = LIMIT_KINDS.some((k) => learned.limits[k] !== null);
    const l = learned.limits;
    // A share falls at once to what the bucket says, and rises by SHARE_RISE_PER_SECOND at most;
    // a kind this answer does not report keeps its share.
    const share = (kind: LimitKind, column: string) => {
      const f = full[kind];
      const col = sql.raw(column);
      if (!f) return sql`${col}`;
      const cases = sql`greatest(${f.ours}::float8, ${f.oursMax}::float8 * least(1, share_requests, share_tokens, share_input_tokens, share_output_tokens))`;
      return sql`least(${col} + ${SHARE_RISE_PER_SECOND} * r.rise_s, greatest(${MIN_SHARE}::float8, least(1, (${f.fullness}::float8 + ${cases}) / ${FULLNESS_TARGET})))`;
    };
    try {
      await this.ensureRow(db, endpoint);
      // rise_s: seconds since the shares were last written by any process.
      await db.execute(sql`
        update model_rate_limits m set
          learned_requests_per_minute = coalesce(${l.requests}::float8, learned_requests_per_minute),
          learned_tokens_per_minute = coalesce(${l.tokens}::float8, learned_tokens_per_minute),
          learned_input_tokens_per_minute = coalesce(${l.input_tokens}::float8, learned_input_tokens_per_minute),
          learned_output_tokens_per_minute = coalesce(${l.output_tokens}::float8, learned_output_tokens_per_minute),
          share_requests = ${share("requests", "share_requests")},
          share_tokens = ${share("tokens", "share_tokens")},
          share_input_tokens = ${share("input_tokens", "share_input_tokens")},
          share_output_tokens = ${share("output_tokens", "share_output_tokens")},
          learned_at = case when ${known} then now() else learned_at end,
          answered_at = coalesce(answered_at, now())
        from (select least(60, extract(epoch from now() - coalesce(learned_at, now() - interval '60 seconds'))) as rise_s
                from model_rate_limits where endpoint = ${endpoint}) r
        where m.endpoint = ${endpoint}`);
    } catch (err) {
      log.warn({ endpoint, err }, "rate limiter: could not record the provider's limits");
    }
  }

  /** A provider said 429: no process starts a call on `endpoint` before now() + retry-after. */
  async recordRateLimited(endpoint: string, retryAfter: number | undefined): Promise<void> {
    if (retryAfter !== undefined && retryAfter > this.settings.maxRetryAfterMs)
      logProblems(endpoint, [`retry-after: ${Math.round(retryAfter / 1000)} s is capped at ${this.settings.maxRetryAfterMs / 1000} s`]);
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

interface Verdict {
  verdict: "ok" | "hold" | "probe" | "exhausted" | "fail_open";
  probing: boolean;
  startMs: number;
  nowMs: number;
  debit: { total: number; input: number; output: number };
  burstMs: number;
}

const FAIL_OPEN: Verdict = { verdict: "fail_open", probing: false, startMs: 0, nowMs: 0, debit: { total: 0, input: 0, output: 0 }, burstMs: 0 };

// ---- what operators see --------------------------------------------------------------------

export interface LearnedLimit {
  endpoint: string;
  /** The model id (the endpoint key's part after "|"). */
  model: string;
  kind: LimitKind;
  /** The provider's stated limit per minute, from its headers. */
  perMinute: number;
  /** The share of it this key may use now (below 1 while another program drains the key). */
  share: number;
}

/** The limits learned from providers' headers, per endpoint and kind (a few rows per endpoint). */
export async function readLearnedLimits(db: Db, args: { limit?: number } = {}): Promise<LearnedLimit[]> {
  const rows = (await db.execute(sql`
    select endpoint,
           learned_requests_per_minute as requests, share_requests as requests_share,
           learned_tokens_per_minute as tokens, share_tokens as tokens_share,
           learned_input_tokens_per_minute as input_tokens, share_input_tokens as input_tokens_share,
           learned_output_tokens_per_minute as output_tokens, share_output_tokens as output_tokens_share
      from model_rate_limits where learned_at is not null
     order by learned_at desc limit ${args.limit ?? 50}`)) as unknown as Array<Record<string, string | number | null>>;
  const out: LearnedLimit[] = [];
  for (const r of rows) {
    const endpoint = String(r.endpoint);
    const model = endpoint.slice(endpoint.lastIndexOf("|") + 1);
    for (const kind of LIMIT_KINDS) {
      const perMinute = r[kind];
      if (perMinute === null || perMinute === undefined) continue;
      out.push({ endpoint, model, kind, perMinute: Number(perMinute), share: Number(r[`${kind}_share`] ?? 1) });
    }
  }
  return out;
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

function tokensOf(usage: LanguageModelV3Usage | undefined): { input?: number; output?: number } {
  return { input: usage?.inputTokens.total, output: usage?.outputTokens.total };
}

function outcomeOf(err: unknown): "error" | "rate_limited" | "aborted" {
  const cls = classifyModelError(err);
  return cls === "rate_limit" ? "rate_limited" : cls === "aborted" ? "aborted" : "error";
}

/** The headers of the provider's answer inside a failed call (an APICallError somewhere in it). */
function errorHeaders(err: unknown, depth = 0): Record<string, string> | undefined {
  if (err === undefined || err === null || depth > 5) return undefined;
  if (APICallError.isInstance(err)) return err.url.startsWith("flotilla-rate-limit:") ? undefined : err.responseHeaders;
  const cause = typeof err === "object" && "cause" in err ? (err as { cause?: unknown }).cause : undefined;
  return cause !== err ? errorHeaders(cause, depth + 1) : undefined;
}

/**
 * Language-model middleware: waits for the shared budget, learns the account's limits from
 * every answer's headers, records a provider 429's retry-after for every process, corrects the
 * token schedules with real usage, and observes latency/tokens. Installed once for every
 * resolved model by server/models/index.ts.
 */
export function rateLimitMiddleware(
  options: { config?: FlotillaConfig; endpoint?: string; limiter?: SharedRateLimiter; budget?: EndpointBudget } = {},
): LanguageModelV3Middleware {
  const limiterFor = () => options.limiter ?? getRateLimiter(options.config ?? getConfig(), options.budget);

  /** Waits for the shared budget of the call's endpoint; the clock starts once it is granted. */
  const reserve = async (params: { prompt: LanguageModelV3Prompt; maxOutputTokens?: number; abortSignal?: AbortSignal }, model: LanguageModelV3) => {
    const limiter = limiterFor();
    const endpoint = options.endpoint ?? endpointKey(model);
    const reservation = await limiter.acquire(endpoint, {
      estimatedTokens: estimatePromptTokens(params.prompt),
      outputTokens: params.maxOutputTokens ?? ASSUMED_OUTPUT_TOKENS,
      signal: params.abortSignal,
    });
    return { limiter, endpoint, reservation, started: performance.now() };
  };
  type Call = Awaited<ReturnType<typeof reserve>>;

  const onError = async (call: Call, err: unknown) => {
    const outcome = outcomeOf(err);
    observeModelCall({ endpoint: call.endpoint, outcome, seconds: (performance.now() - call.started) / 1000 });
    // An aborted call says nothing; any answer (a 429 too) still tells the account's state.
    if (outcome !== "aborted") await call.limiter.recordAnswer(call.endpoint, errorHeaders(err) ?? {}, call.reservation);
    if (outcome === "rate_limited") await call.limiter.recordRateLimited(call.endpoint, retryAfterMs(err));
  };

  /** A call that ended well: latency and tokens observed, the budget corrected with real usage. */
  const onSuccess = async (call: Call, usage: LanguageModelV3Usage | undefined): Promise<void> => {
    const t = tokensOf(usage);
    observeModelCall({
      endpoint: call.endpoint,
      outcome: "ok",
      seconds: (performance.now() - call.started) / 1000,
      inputTokens: t.input,
      outputTokens: t.output,
    });
    await call.limiter.settle(call.endpoint, call.reservation, t);
  };

  return {
    specificationVersion: "v3",
    async wrapGenerate({ doGenerate, params, model }) {
      const call = await reserve(params, model);
      try {
        const result = await doGenerate();
        await call.limiter.recordAnswer(call.endpoint, result.response?.headers ?? {}, call.reservation);
        await onSuccess(call, result.usage);
        return result;
      } catch (err) {
        await onError(call, err);
        throw err;
      }
    },
    async wrapStream({ doStream, params, model }) {
      const call = await reserve(params, model);
      let result: Awaited<ReturnType<typeof doStream>>;
      try {
        result = await doStream();
      } catch (err) {
        await onError(call, err);
        throw err;
      }
      // The headers arrive before the body: learn from them now, not when the stream ends.
      await call.limiter.recordAnswer(call.endpoint, result.response?.headers ?? {}, call.reservation);
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
              const outcome = outcomeOf(failed);
              observeModelCall({ endpoint: call.endpoint, outcome, seconds: (performance.now() - call.started) / 1000 });
              if (outcome === "rate_limited") await call.limiter.recordRateLimited(call.endpoint, retryAfterMs(failed));
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
