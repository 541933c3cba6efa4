import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import { tokenCount } from "@/lib/api/subagents";
import type { Logger } from "@/server/log";

/**
 * The process's Prometheus registry and the counters the working modules bump (one registry per
 * process, on globalThis so hot-reloaded route modules share it). Imports nothing above it, so
 * the rate limiter, the worker loop and the export can record here; the gauges read on scrape
 * and the exposition live in server/metrics.ts. Names: docs/DEPLOYMENT.md ("Metrics").
 */

interface Instruments {
  registry: Registry;
  claims: Counter;
  leaseRecoveries: Counter;
  attempts: Counter<"outcome">;
  deferrals: Counter<"reason">;
  modelCalls: Histogram<"endpoint" | "outcome">;
  modelTokens: Counter<"endpoint" | "direction">;
  providerRateLimited: Counter<"endpoint">;
  limiterWait: Histogram<"endpoint">;
  exportBytes: Counter;
  exportsInFlight: Gauge;
  /** The gauge's value, readable synchronously. */
  exports: number;
}

const globalForInstruments = globalThis as unknown as { __flotillaInstruments?: Instruments };

function build(): Instruments {
  const registry = new Registry();
  const registers = [registry];
  collectDefaultMetrics({ register: registry });

  const state: Instruments = {
    registry,
    claims: new Counter({
      name: "flotilla_batch_claims_total",
      help: "Batch items this process claimed (leased) for execution.",
      registers,
    }),
    leaseRecoveries: new Counter({
      name: "flotilla_batch_lease_recoveries_total",
      help: "Expired item leases this process returned to queued (or failed at max attempts).",
      registers,
    }),
    attempts: new Counter({
      name: "flotilla_batch_attempts_total",
      help: "Finished batch item attempts in this process, by outcome.",
      labelNames: ["outcome"],
      registers,
    }),
    deferrals: new Counter({
      name: "flotilla_rate_limit_deferrals_total",
      help: "Batch items put back to queued without consuming an attempt (rate_limit: after retry-after; released: refused by capacity or interrupted by a database outage).",
      labelNames: ["reason"],
      registers,
    }),
    modelCalls: new Histogram({
      name: "flotilla_model_call_duration_seconds",
      help: "Model call latency (request start to end of response or stream), excluding rate-limit waiting.",
      labelNames: ["endpoint", "outcome"],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80, 160],
      registers,
    }),
    modelTokens: new Counter({
      name: "flotilla_model_tokens_total",
      help: "Tokens reported by the model provider, by direction (input/output).",
      labelNames: ["endpoint", "direction"],
      registers,
    }),
    providerRateLimited: new Counter({
      name: "flotilla_model_rate_limited_total",
      help: "Provider HTTP 429 answers seen by this process.",
      labelNames: ["endpoint"],
      registers,
    }),
    limiterWait: new Histogram({
      name: "flotilla_rate_limit_wait_seconds",
      help: "Time a model call waited for the shared (cross-process) rate-limit budget.",
      labelNames: ["endpoint"],
      buckets: [0, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    }),
    exportBytes: new Counter({
      name: "flotilla_export_bytes_total",
      help: "Bytes of JSONL result exports streamed by this process.",
      registers,
    }),
    exportsInFlight: new Gauge({
      name: "flotilla_exports_in_flight",
      help: "results.jsonl exports of this process not yet finished (waiting for a connection, streaming, or stopping).",
      registers,
    }),
    exports: 0,
  };
  return state;
}

function state(): Instruments {
  globalForInstruments.__flotillaInstruments ??= build();
  return globalForInstruments.__flotillaInstruments;
}

/** The registry itself (the exposition renders it; tests read values with getSingleMetric). */
export function metricsRegistry(): Registry {
  return state().registry;
}

// ---- one-line hooks for other modules -------------------------------------------------------

/** Claimed items (or a count); with a logger at debug, one "item claimed" line per item tying item to batch. */
export function recordClaims(
  claimed: number | ReadonlyArray<{ id: string; batchId: string; attempt: number }>,
  logger?: Logger,
): void {
  const n = typeof claimed === "number" ? claimed : claimed.length;
  if (n > 0) state().claims.inc(n);
  // Per-item lines are debug: at info they were a measurable share of a zero-latency item's CPU.
  if (logger?.isLevelEnabled("debug") && typeof claimed !== "number")
    for (const c of claimed) logger.debug({ item_id: c.id, batch_id: c.batchId, attempt: c.attempt }, "item claimed");
}

/**
 * Ended attempts as the worker settled them: `moved` maps item id → new status for the settled
 * ones (absent = the lease was no longer held, the write was fenced off). Counts attempts by
 * outcome and deferrals; with a logger, one "item settled" line per item tying item to run
 * (debug for successes, info for every other outcome).
 */
/** What counting needs of an ended attempt (server/batches/settlement.ts's Settlement has it). */
export interface SettledAttempt {
  id: string;
  kind: string;
  runId?: string | null;
  error?: string;
}

export function recordSettlements(
  settlements: ReadonlyArray<SettledAttempt>,
  moved: ReadonlyMap<string, string>,
  logger?: Logger,
): void {
  const s = state();
  for (const st of settlements) {
    const status = moved.get(st.id);
    let outcome: string;
    if (status === undefined) outcome = "lost";
    else if (st.kind === "deferred") outcome = status === "queued" ? "deferred" : "failed";
    else if (st.kind === "released") outcome = "released";
    else if (st.kind === "failed") outcome = status === "queued" ? "retried" : "failed";
    else outcome = st.kind;
    s.attempts.inc({ outcome });
    if (outcome === "deferred") s.deferrals.inc({ reason: "rate_limit" });
    else if (outcome === "released") s.deferrals.inc({ reason: "released" });
    const level = outcome === "succeeded" ? "debug" : "info";
    if (!logger?.isLevelEnabled(level)) continue;
    logger[level](
      {
        item_id: st.id,
        run_id: "runId" in st ? (st.runId ?? undefined) : undefined,
        outcome,
        status: status ?? "unchanged",
        ...("error" in st && outcome !== "succeeded" ? { error: st.error } : {}),
      },
      "item settled",
    );
  }
}
export function recordLeaseRecoveries(n = 1): void {
  if (n > 0) state().leaseRecoveries.inc(n);
}
export function recordExportBytes(bytes: number): void {
  if (bytes > 0) state().exportBytes.inc(bytes);
}
/** Counts `exporting` as in flight until it settles (however it settles). */
export function trackExport<T>(exporting: Promise<T>): Promise<T> {
  const s = state();
  s.exportsInFlight.set(++s.exports);
  return exporting.finally(() => s.exportsInFlight.set(--s.exports));
}
export function exportsInFlight(): number {
  return state().exports;
}
/** Counts an export chunk's bytes and passes it through: `controller.enqueue(exportChunk(bytes))`. */
export function exportChunk(chunk: Uint8Array): Uint8Array {
  recordExportBytes(chunk.byteLength);
  return chunk;
}
export function observeModelCall(args: {
  endpoint: string;
  outcome: "ok" | "error" | "rate_limited" | "aborted";
  seconds: number;
  inputTokens?: number;
  outputTokens?: number;
}): void {
  const s = state();
  s.modelCalls.observe({ endpoint: args.endpoint, outcome: args.outcome }, args.seconds);
  // A provider's counts as stored (tokenCount): a negative one would make prom-client throw, failing the call.
  const input = tokenCount(args.inputTokens);
  const output = tokenCount(args.outputTokens);
  if (input) s.modelTokens.inc({ endpoint: args.endpoint, direction: "input" }, input);
  if (output) s.modelTokens.inc({ endpoint: args.endpoint, direction: "output" }, output);
  if (args.outcome === "rate_limited") s.providerRateLimited.inc({ endpoint: args.endpoint });
}
export function observeRateLimitWait(endpoint: string, seconds: number): void {
  state().limiterWait.observe({ endpoint }, seconds);
}

