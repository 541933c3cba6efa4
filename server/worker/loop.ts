import { AbortReason, errorText } from "@/server/errors";
import type { FlotillaConfig } from "@/lib/config";
import {
  claimItems,
  findLostLeases,
  getExecutionSpecs,
  markRunning,
  recoverExpiredLeases,
  renewLeases,
  settleAndClaim,
  settleItems,
} from "@/server/batches/claim";
import { BATCH_CHANNEL, parseBatchEvent } from "@/server/batches/notify";
import type { ExecutionSpec } from "@/server/batches/spec";
import type { ClaimedItem, LeaseRef, Settlement } from "@/server/batches/types";
import type { Database } from "@/server/db/client";
import { type Logger, log as rootLog } from "@/server/log";
import { recordClaims, recordLeaseRecoveries, recordSettlements } from "@/server/instruments";
import { OutageBackoff } from "@/server/ops/backoff";
import { isDatabaseUnavailable } from "@/server/ops/db-errors";
import type { ResolvedModel } from "@/server/models/types";
import { getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import { isCapacityError } from "@/server/runtime/capacity";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { type ItemExecutor, type ItemRunResult, subagentItemExecutor } from "./execute";
import { HEARTBEAT_INTERVAL_MS, markStopped, writeHeartbeat } from "@/server/runtime/heartbeat";

/**
 * The batch worker: claims items from Postgres up to the free slots of the process capacity,
 * runs them, and settles them — all state lives in Postgres, this process only holds leases.
 *
 * Write path, designed for throughput: claims come in batches (one function call for all free
 * slots), `running` transitions started in the same tick are flushed in one statement, and
 * completions are settled in one statement right before the next claim. A finished item frees
 * its slot immediately (the next claim does not wait for the poll timer).
 *
 * Every poll: recover expired leases (anyone's), check that every local lease is still held
 * (a cancel or lease loss aborts the local run within one poll interval), renew leases every
 * lease_seconds / 3. LISTEN/NOTIFY only shortens latency; polling alone is correct.
 */

export interface BatchWorkerOptions {
  database: Database;
  config: FlotillaConfig;
  /** Lease owner and heartbeat id. Default: this process's INSTANCE_ID. */
  instanceId?: string;
  model?: ResolvedModel;
  /** Capacity boundary; default the process runtime (shared with anything else in the process). */
  runtime?: SubagentRuntime;
  /** Default: the shared sub-agent executor. */
  executor?: ItemExecutor;
  /** LISTEN for submit/resume/retry/cancel wake-ups (default true). */
  listen?: boolean;
  /** Write worker_heartbeats (default true). */
  heartbeat?: boolean;
  logger?: Logger;
}

/** Abort reasons the worker gives its own runs; none of them writes the item row. */
const leaseLost = (message = "the lease on this item is no longer held (cancelled, expired or re-claimed)") =>
  new AbortReason("lease_lost", message);
const shuttingDown = () =>
  new AbortReason("shutdown", "the worker is shutting down; the item goes back to the queue for another worker");

interface LocalItem {
  item: ClaimedItem;
  controller: AbortController;
  done: Promise<void>;
}

interface MarkRequest {
  ref: LeaseRef;
  resolve: (ok: boolean) => void;
  reject: (err: unknown) => void;
}

const DEFAULT_RATE_LIMIT_DELAY_MS = 5_000;

export class BatchWorker {
  readonly id: string;
  private readonly db: Database["db"];
  private readonly config: FlotillaConfig;
  private readonly runtime: SubagentRuntime;
  private readonly executor: ItemExecutor;
  private readonly log: Logger;
  private readonly leaseSeconds: number;
  /** While the database is away, polls back off exponentially with jitter instead of hammering it. */
  private readonly outage = new OutageBackoff(1_000);
  private readonly local = new Map<string, LocalItem>();
  private readonly specs = new Map<string, ExecutionSpec | Error>();
  private settlements: Settlement[] = [];
  private marks: MarkRequest[] = [];
  private markScheduled = false;
  private pumping = false;
  private pumpAgain = false;
  private pumpScheduled = false;
  private maintaining = false;
  private started = false;
  private stopping = false;
  private renewing = false;
  private timers: ReturnType<typeof setInterval>[] = [];
  private unlisten: (() => Promise<void>) | undefined;
  private idle: Promise<void> = Promise.resolve();
  /** Counters for tests and benchmarks. */
  readonly counters = { claimed: 0, settled: 0, released: 0, lost: 0, claimCalls: 0 };

  constructor(private readonly options: BatchWorkerOptions) {
    this.id = options.instanceId ?? INSTANCE_ID;
    this.db = options.database.db;
    this.config = options.config;
    this.runtime = options.runtime ?? getSubagentRuntime();
    this.executor =
      options.executor ??
      // Each item runs on the model its batch spec names, resolved from this worker's catalog.
      subagentItemExecutor({ db: this.db, model: options.model, runtime: this.runtime });
    this.log = (options.logger ?? rootLog).child({ worker_id: this.id });
    this.leaseSeconds = options.config.subagent_batches.lease_seconds;
  }

  /** Slots this process may still fill: its capacity minus local items and anything else holding or waiting. */
  get freeSlots(): number {
    const s = this.runtime.capacity.stats();
    return Math.max(0, s.maxRunning - Math.max(this.local.size, s.running + s.queued));
  }

  get localCount(): number {
    return this.local.size;
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    const b = this.config.subagent_batches;
    if (this.options.heartbeat !== false) {
      await this.beat();
      this.timers.push(setInterval(() => void this.beat(), HEARTBEAT_INTERVAL_MS));
    }
    if (this.options.listen !== false) {
      try {
        const req = await this.options.database.sql.listen(BATCH_CHANNEL, (payload) => this.onNotify(payload));
        this.unlisten = () => req.unlisten();
      } catch (err) {
        this.log.warn({ err }, "LISTEN failed; relying on polling");
      }
    }
    this.timers.push(setInterval(() => void this.maintain(), Math.max(50, b.poll_interval_seconds * 1000)));
    // Renew at a third of the lease, independent of the poll, so short leases never lapse while held.
    this.timers.push(setInterval(() => void this.renew(), Math.max(50, (this.leaseSeconds * 1000) / 3)));
    this.log.info({ capacity: this.runtime.capacity.maxRunning, lease_seconds: this.leaseSeconds }, "batch worker started");
    void this.maintain();
  }

  /**
   * Shutdown: stop claiming, abort local runs, wait for them to unwind, then hand every row
   * that did not finish back to `queued` at once with its attempt restored (a `released`
   * settlement, fenced by this worker's lease owner + token). Nothing is finalized here; an
   * item that really finished before the stop is settled as usual. Lease expiry is the
   * handoff only when a worker dies without this chance (SIGKILL, crash).
   */
  async stop(options: { waitMs?: number } = {}): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.unlisten?.().catch(() => {});
    // A claim pass in flight may still start items; let it finish so they are aborted too.
    await this.idle.catch(() => {});
    const reason = shuttingDown();
    const running = [...this.local.values()];
    for (const l of running) l.controller.abort(reason);
    await Promise.race([
      Promise.allSettled(running.map((l) => l.done)),
      new Promise((r) => setTimeout(r, options.waitMs ?? 10_000)),
    ]);
    await this.idle.catch(() => {});
    const settling = new Set(this.settlements.map((s) => s.id));
    let handedBack = 0;
    for (const l of running) {
      if (settling.has(l.item.id)) continue;
      this.settlements.push({ kind: "released", id: l.item.id, leaseToken: l.item.leaseToken });
      handedBack++;
    }
    if (this.settlements.length) {
      await this.flushSettlements().catch((err) =>
        this.log.warn({ err }, "could not hand rows back at shutdown; their leases will expire"),
      );
    }
    if (this.options.heartbeat !== false) await markStopped(this.db, this.id).catch(() => {});
    this.log.info({ handed_back: handedBack }, "batch worker stopped");
  }

  /** Schedules a settle + claim pass (coalesced: many calls in one tick make one pass). */
  kick(): void {
    // Once stopping, stop() settles what is left itself; a pass started now would race it.
    if (this.stopping) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      if (this.stopping) return;
      this.idle = this.pump();
    });
  }

  private async pump(): Promise<void> {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.pumpAgain = false;
        await this.settleAndClaimPass();
      } while (this.pumpAgain && !this.stopping);
    } catch (err) {
      this.log.error({ err }, "claim/settle pass failed; retrying at the next poll");
    } finally {
      this.pumping = false;
    }
  }

  private async flushSettlements(): Promise<void> {
    if (this.settlements.length === 0) return;
    const batch = this.settlements;
    this.settlements = [];
    try {
      const moved = await settleItems(this.db, {
        workerId: this.id,
        settlements: batch,
        maxDeferrals: this.config.rate_limits.max_deferrals,
      });
      this.counters.settled += moved.size;
      recordSettlements(batch, moved, this.log);
      if (moved.size < batch.length) this.counters.lost += batch.length - moved.size;
    } catch (err) {
      // Keep them: the next pass retries (the fence makes a repeated settle harmless).
      this.settlements.unshift(...batch);
      throw err;
    }
  }

  /**
   * Completions and the next claim in one transaction when there are completions; a plain
   * (waiting) claim otherwise, or when the combined call found every batch busy.
   */
  private async settleAndClaimPass(): Promise<void> {
    const free = this.stopping ? 0 : this.freeSlots;
    let claimed: ClaimedItem[] = [];
    if (this.settlements.length > 0) {
      const batch = this.settlements;
      this.settlements = [];
      try {
        this.counters.claimCalls++;
        const res = await settleAndClaim(this.db, {
          workerId: this.id,
          settlements: batch,
          maxDeferrals: this.config.rate_limits.max_deferrals,
          limit: free,
          leaseSeconds: this.leaseSeconds,
        });
        this.counters.settled += res.settled.size;
        this.counters.lost += batch.length - res.settled.size;
        recordSettlements(batch, res.settled, this.log);
        claimed = res.claimed;
      } catch (err) {
        // Keep them: the next pass retries (the fence makes a repeated settle harmless).
        this.settlements.unshift(...batch);
        throw err;
      }
      if (claimed.length > 0 || free === 0) return this.startClaimed(claimed);
    }
    if (free <= 0) return;
    this.counters.claimCalls++;
    claimed = await claimItems(this.db, { workerId: this.id, limit: free, leaseSeconds: this.leaseSeconds });
    await this.startClaimed(claimed);
  }

  private async startClaimed(claimed: ClaimedItem[]): Promise<void> {
    if (claimed.length === 0) return;
    this.counters.claimed += claimed.length;
    recordClaims(claimed, this.log);
    const unknown = [...new Set(claimed.map((c) => c.batchId))].filter((id) => !this.specs.has(id));
    if (unknown.length) {
      try {
        const specs = await getExecutionSpecs(this.db, { batchIds: unknown });
        for (const [id, spec] of specs) this.specs.set(id, spec);
        while (this.specs.size > 1024) this.specs.delete(this.specs.keys().next().value as string);
      } catch (err) {
        // Could not read the specs: hand the items straight back (no attempt used) rather than sit on them.
        for (const item of claimed) this.settlements.push({ kind: "released", id: item.id, leaseToken: item.leaseToken });
        this.pumpAgain = true;
        throw err;
      }
    }
    for (const item of claimed) this.startItem(item);
  }

  private startItem(item: ClaimedItem): void {
    const controller = new AbortController();
    const entry: LocalItem = { item, controller, done: Promise.resolve() };
    this.local.set(item.id, entry);
    entry.done = this.runItem(item, controller).finally(() => {
      // The item may already be re-claimed (a retry) under a new entry; leave that one alone.
      if (this.local.get(item.id) === entry) this.local.delete(item.id);
      this.kick();
    });
  }

  private async runItem(item: ClaimedItem, controller: AbortController): Promise<void> {
    const ref = { id: item.id, leaseToken: item.leaseToken };
    const spec = this.specs.get(item.batchId);
    if (!spec || spec instanceof Error) {
      this.settlements.push({
        ...ref,
        kind: "failed",
        retryable: false,
        error: `cannot rebuild the execution boundary: ${spec instanceof Error ? spec.message : "execution spec missing"}`,
      });
      return;
    }
    // `running` is written as execution starts but not awaited before it: the mark's round trip
    // overlaps the model call instead of delaying it. A refused mark (the lease was lost, the item
    // cancelled) aborts the call, and nothing is settled for an item that was never marked.
    let marked: Promise<boolean> | undefined;
    const onStarted = async () => {
      if (marked) return;
      marked = this.requestRunning(ref).catch((err) => {
        this.log.warn({ err, item_id: item.id }, "could not mark the item running; abandoning it to lease expiry");
        return false;
      });
      void marked.then((ok) => {
        if (!ok) controller.abort(leaseLost());
      });
    };
    let result: ItemRunResult;
    try {
      result = await this.executor({ item, spec, signal: controller.signal, onStarted });
    } catch (err) {
      if (controller.signal.aborted) return; // cancelled, lease lost or shutting down: no write
      if (isCapacityError(err) || isDatabaseUnavailable(err)) {
        this.counters.released++;
        this.settlements.push({ ...ref, kind: "released" });
        return;
      }
      if (marked && !(await marked)) return;
      this.settlements.push({ ...ref, kind: "failed", error: errorText(err) });
      return;
    }
    if (marked && !(await marked)) return;
    if (controller.signal.aborted) return;
    this.settlements.push(this.toSettlement(ref, result));
  }

  private toSettlement(ref: LeaseRef, r: ItemRunResult): Settlement {
    const b = this.config.subagent_batches;
    const common = { model: r.model, stopReason: r.stopReason, usage: r.usage, runId: r.runId ?? null };
    if (r.status === "completed") {
      const result = r.text.length > b.max_result_chars ? r.text.slice(0, b.max_result_chars) : r.text;
      return { ...ref, ...common, kind: "succeeded", result, preview: result.slice(0, b.result_preview_max_chars) };
    }
    if (r.status === "failed" && r.errorClass === "rate_limit") {
      const base = r.retryAfterMs ?? DEFAULT_RATE_LIMIT_DELAY_MS;
      return {
        ...ref,
        kind: "deferred",
        delayMs: Math.round(base * (1 + Math.random() * 0.2)),
        error: r.error ?? "rate limited by the model provider",
        usage: r.usage,
        model: r.model,
        runId: r.runId ?? null,
      };
    }
    const error =
      r.status === "timed_out"
        ? (r.error ?? "the sub-agent timed out")
        : r.status === "cancelled"
          ? (r.error ?? "the sub-agent run was stopped")
          : (r.error ?? "the sub-agent failed");
    return { ...ref, ...common, kind: "failed", error };
  }

  /**
   * Coalesces leased → running requests into one statement, one statement in flight at a time:
   * requests arriving while one runs go out together in the next, so under load the batches
   * grow instead of the number of concurrent writers to the same batch row.
   */
  private requestRunning(ref: LeaseRef): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.marks.push({ ref, resolve, reject });
      this.scheduleMarks();
    });
  }

  private scheduleMarks(): void {
    if (this.markScheduled || this.marks.length === 0) return;
    this.markScheduled = true;
    setImmediate(() => {
      const batch = this.marks;
      this.marks = [];
      markRunning(this.db, { workerId: this.id, leaseSeconds: this.leaseSeconds, items: batch.map((m) => m.ref) })
        .then(
          (ok) => {
            for (const m of batch) m.resolve(ok.has(m.ref.id));
          },
          (err) => {
            for (const m of batch) m.reject(err);
          },
        )
        .finally(() => {
          this.markScheduled = false;
          this.scheduleMarks();
        });
    });
  }

  private onNotify(payload: string): void {
    const event = parseBatchEvent(payload);
    if (!event || this.stopping) return;
    if (event.event === "cancel") {
      // Committed before the notification was delivered: every local item of the batch is cancelled.
      for (const l of this.local.values())
        if (l.item.batchId === event.batchId) l.controller.abort(leaseLost("the batch was cancelled"));
      return;
    }
    this.kick();
  }

  private async beat(): Promise<void> {
    try {
      await writeHeartbeat(this.db, { id: this.id, capacity: this.runtime.capacity.maxRunning, running: this.local.size });
    } catch (err) {
      this.log.warn({ err }, "heartbeat failed");
    }
  }

  private localRefs(): LeaseRef[] {
    return [...this.local.values()].map((l) => ({ id: l.item.id, leaseToken: l.item.leaseToken }));
  }

  private abortLost(ids: string[]): void {
    for (const id of ids) this.local.get(id)?.controller.abort(leaseLost());
  }

  /** One statement extends every lease this worker holds; lost ones abort their runs. */
  private async renew(): Promise<void> {
    if (this.renewing || this.stopping) return;
    const refs = this.localRefs();
    if (refs.length === 0) return;
    this.renewing = true;
    try {
      const { lost } = await renewLeases(this.db, { workerId: this.id, leaseSeconds: this.leaseSeconds, items: refs });
      this.abortLost(lost);
    } catch (err) {
      this.log.warn({ err }, "lease renewal failed");
    } finally {
      this.renewing = false;
    }
  }

  /** The poll: recovery of anyone's expired leases, a check that local leases are still held, then a claim pass. */
  private async maintain(): Promise<void> {
    if (this.maintaining || this.stopping || this.outage.holding()) return;
    this.maintaining = true;
    try {
      const recovered = await recoverExpiredLeases(this.db);
      recordLeaseRecoveries(recovered.requeued + recovered.failed);
      if (recovered.requeued + recovered.failed > 0) this.log.info(recovered, "recovered expired leases");
      const refs = this.localRefs();
      if (refs.length) this.abortLost(await findLostLeases(this.db, { workerId: this.id, items: refs }));
      this.outage.succeeded();
    } catch (err) {
      this.log.warn({ err, retry_in_ms: Math.round(this.outage.failed()) }, "maintenance pass failed");
    } finally {
      this.maintaining = false;
    }
    this.kick();
  }
}
