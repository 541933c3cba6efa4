import { writeFinishedRunRow } from "@/server/agent/runs";
import { AbortReason, errorCodeOf, errorText } from "@/server/errors";
import type { FlotillaConfig } from "@/lib/config";
import { expireApprovals } from "@/server/batches/approvals";
import {
  findLostLeases,
  readExecutionSpec,
  recoverExpiredLeases,
  renewLeases,
  settleItems,
  workerPass,
} from "@/server/batches/claim";
import { BATCH_CHANNEL, parseBatchEvent } from "@/server/batches/notify";
import { type Settlement, settlementOf } from "@/server/batches/settlement";
import type { ExecutionSpec } from "@/server/batches/spec";
import type { ClaimedItem, LeaseRef } from "@/server/batches/types";
import type { Database } from "@/server/db/client";
import { type Logger, log as rootLog } from "@/server/log";
import { recordClaims, recordLeaseRecoveries, recordSettlements } from "@/server/instruments";
import type { ResolvedModel } from "@/server/models/types";
import { OutageBackoff } from "@/server/ops/backoff";
import { isDatabaseUnavailable } from "@/server/ops/db-errors";
import { getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import { isCapacityError } from "@/server/runtime/capacity";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { Coalescer } from "./coalesce";
import { type ItemExecutor, subagentItemExecutor } from "./execute";
import { ProviderLane } from "./provider-lane/lane";
import { settleEach } from "./settle";
import { HEARTBEAT_INTERVAL_MS, markStopped, writeHeartbeat } from "@/server/runtime/heartbeat";

/**
 * The batch worker: claims items from Postgres, runs them on the free slots of the process
 * capacity, and settles them. All state lives in Postgres; this process only holds leases.
 *
 * Like graphile-worker 0.17's local queue and batched completion: one round trip (a "pass",
 * worker-pass.sql) marks running the items slots started, settles everything that finished since
 * the last one, and claims for the free slots plus a local queue (leased, from batches' spare
 * room only, so the running limit stays exact and no other worker's free slot is starved). A
 * slot that frees takes its next item from the local queue without waiting for the database.
 * One pass is in flight at a time; whatever starts or finishes meanwhile goes out together in
 * the next, so a wave of slots costs one round trip, not one per transition.
 *
 * Every poll: recover expired leases (anyone's), check that every local lease is still held (a
 * cancel or lease loss aborts the local run within one poll interval); renewal every
 * lease_seconds / 3. LISTEN/NOTIFY only shortens latency; polling alone is correct.
 *
 * A pass PostgreSQL refuses (a row it cannot store) settles its rows one at a time, so only the
 * refusing item fails (`storage_refused`, server/worker/settle.ts). While passes fail the worker
 * writes no heartbeat, and once they have failed for STUCK_AFTER_MS it calls `onStuck` (the
 * entrypoint exits, and `npm start` starts a new worker). A pass that gave up waiting on a lock
 * another session holds is no such failure: the worker waits it out (`waitsOnLock`).
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
  /**
   * Items claimed ahead of free slots (default 0: off). Claimed-ahead rows are leased: they count
   * toward their batch's running limit and are taken only from spare room, but while a slot is
   * busy they wait behind it, and a batch whose items wait in a local queue does not read as
   * waiting for capacity. Worth it when a batch's limit is far above the workers' slots and items
   * are short (the raw benchmark).
   */
  localQueueSize?: number;
  logger?: Logger;
  /** A pass ended (succeeded, failed or was abandoned at its statement or lock timeout): the loop's progress. */
  onPassEnded?: () => void;
  /** Run the provider batch lane (default true; server/worker/provider-lane/). */
  providerLane?: boolean;
  /** Passes have failed for `stuckAfterMs` (default STUCK_AFTER_MS): called once per such stretch. */
  onStuck?: (failingForMs: number) => void;
  stuckAfterMs?: number;
}

/** How long passes may keep failing before the worker gives up (DESIGN: 60 s). */
export const STUCK_AFTER_MS = 60_000;

/** Abort reasons the worker gives its own runs; none of them writes the item row. */
const leaseLost = (message = "the lease on this item is no longer held (cancelled, expired or re-claimed)") =>
  new AbortReason("lease_lost", message);
const shuttingDown = () =>
  new AbortReason("shutdown", "the worker is shutting down; the item goes back to the queue for another worker");

interface LocalItem {
  item: ClaimedItem;
  controller: AbortController;
  done: Promise<void>;
  /** Its settlement is queued: nothing else may settle it. */
  ended: boolean;
}

/** A leased → running write requested by a slot that took an item from the local queue. */
interface Mark {
  entry: LocalItem;
  startedAtMs: number;
}

export class BatchWorker {
  readonly id: string;
  private readonly db: Database["db"];
  private readonly config: FlotillaConfig;
  private readonly runtime: SubagentRuntime;
  private readonly executor: ItemExecutor;
  private readonly log: Logger;
  private readonly leaseSeconds: number;
  private readonly localQueueSize: number;
  /** While the database is away, polls back off exponentially with jitter instead of hammering it. */
  private readonly outage = new OutageBackoff(1_000);
  /** Items executing on a slot. */
  private readonly running = new Map<string, LocalItem>();
  /** Items claimed ahead, still leased, in the order slots take them. */
  private queue: ClaimedItem[] = [];
  private readonly specs = new Map<string, ExecutionSpec | Error>();
  private settlements: Settlement[] = [];
  private marks: Mark[] = [];
  private readonly pass: Coalescer;
  private readonly renewal: Coalescer;
  private readonly poll: Coalescer;
  private started = false;
  private stopping = false;
  /** When the last pass ended; a loop stalled longer than stallMs writes no heartbeat. */
  private lastPassEndedAt = Date.now();
  private readonly stallMs: number;
  /** When the first of the passes failing since the last one that succeeded failed. */
  private failingSince: number | undefined;
  private stuck = false;
  /** Since when passes give up waiting on a lock someone else holds, and when that was last logged. */
  private waitingSince: number | undefined;
  private lockWaitLoggedAt: number | undefined;
  private timers: ReturnType<typeof setInterval>[] = [];
  private unlisten: (() => Promise<void>) | undefined;
  /** Items of provider_batch batches: sent to the provider's batch API, polled, settled (no slot while there). */
  readonly providerLane: ProviderLane | undefined;
  /** Counters for tests and benchmarks, of rows written (released: handed back to the queue). */
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
    this.localQueueSize = Math.max(0, options.localQueueSize ?? 0);
    this.stallMs = stallMsOf(options.config);
    if (options.providerLane !== false)
      this.providerLane = new ProviderLane({
        db: this.db,
        config: this.config,
        workerId: this.id,
        runtime: this.runtime,
        model: options.model,
        adopt: (items, spec) => this.adopt(items, spec),
        log: this.log,
      });
    this.pass = new Coalescer(
      () =>
        this.runPass().finally(() => {
          this.lastPassEndedAt = Date.now();
          options.onPassEnded?.();
        }),
      (err) => {
        if (isLockWait(err)) {
          this.waitsOnLock(err);
          return;
        }
        this.failingSince ??= Date.now();
        const failingForMs = Date.now() - this.failingSince;
        if (isStatementTimeout(err))
          this.log.error({ err, failing_for_ms: failingForMs }, "worker pass abandoned: it ran past its statement or lock timeout; retrying at the next poll");
        else this.log.error({ err, failing_for_ms: failingForMs }, "worker pass failed; retrying at the next poll");
        if (failingForMs >= (options.stuckAfterMs ?? STUCK_AFTER_MS) && !this.stuck) {
          this.stuck = true;
          this.options.onStuck?.(failingForMs);
        }
      },
    );
    this.renewal = new Coalescer(
      () => this.renew(),
      (err) => this.log.warn({ err }, "lease renewal failed"),
    );
    this.poll = new Coalescer(
      () => this.maintain(),
      (err) => this.log.warn({ err, retry_in_ms: Math.round(this.outage.failed()) }, "maintenance pass failed"),
    );
  }

  /** Slots this process may still fill: its capacity minus local runs and anything else holding or waiting. */
  get freeSlots(): number {
    const s = this.runtime.capacity.stats();
    return Math.max(0, s.maxRunning - Math.max(this.running.size, s.running + s.queued));
  }

  /** Items this worker holds: running on a slot or waiting in its local queue. */
  get localCount(): number {
    return this.running.size + this.queue.length;
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
    this.timers.push(setInterval(() => this.poll.request(), Math.max(50, b.poll_interval_seconds * 1000)));
    // Renew at a third of the lease, independent of the poll, so short leases never lapse while held.
    this.timers.push(setInterval(() => this.renewal.request(), Math.max(50, (this.leaseSeconds * 1000) / 3)));
    this.log.info({ capacity: this.runtime.capacity.maxRunning, lease_seconds: this.leaseSeconds }, "batch worker started");
    this.poll.request();
    this.providerLane?.start();
  }

  /**
   * Shutdown: stop claiming, abort local runs, wait for them to unwind, then hand every row
   * that did not finish (running or waiting in the local queue) back to `queued` at once with
   * its attempt restored (a `released` settlement, fenced by this worker's lease owner + token).
   * Nothing is finalized here; an item that really finished before the stop is settled as
   * usual. Lease expiry is the handoff only when a worker dies without this chance.
   */
  async stop(options: { waitMs?: number } = {}): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.unlisten?.().catch(() => {});
    await this.providerLane?.stop();
    // A pass in flight may still claim items; let it finish so they are handed back too.
    await Promise.all([this.pass.close(), this.renewal.close(), this.poll.close()]);
    const reason = shuttingDown();
    const running = [...this.running.values()];
    for (const l of running) l.controller.abort(reason);
    await Promise.race([
      Promise.allSettled(running.map((l) => l.done)),
      new Promise((r) => setTimeout(r, options.waitMs ?? 10_000)),
    ]);
    const settling = new Set(this.settlements.map((s) => s.id));
    const unfinished = [...running.map((l) => l.item), ...this.queue].filter((i) => !settling.has(i.id));
    this.queue = [];
    for (const i of unfinished) this.settlements.push({ kind: "released", id: i.id, leaseToken: i.leaseToken });
    if (this.settlements.length) {
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
      } catch (err) {
        if (isDatabaseUnavailable(err)) this.log.warn({ err }, "could not hand rows back at shutdown; their leases will expire");
        else await this.settleEach(batch, err);
      }
    }
    if (this.options.heartbeat !== false) await markStopped(this.db, this.id).catch(() => {});
    this.log.info({ handed_back: unfinished.length }, "batch worker stopped");
  }

  /**
   * Items the provider lane sends back to the live lane (expired at the provider), already leased
   * to this worker: they wait in the local queue for a slot like claimed ones.
   */
  private adopt(items: ClaimedItem[], spec: ExecutionSpec): void {
    this.specs.set(items[0]!.batchId, spec);
    if (this.stopping) {
      for (const i of items) this.settlements.push({ kind: "released", id: i.id, leaseToken: i.leaseToken });
      return;
    }
    this.queue.push(...items);
    this.fillSlots();
    this.kick();
  }

  /** Asks for a pass (coalesced: many calls in one tick make one round trip). */
  kick(): void {
    if (!this.stopping) this.pass.request();
  }

  /** One round trip: settle, mark running, claim. On failure the settlements and marks are kept for the next. */
  private async runPass(): Promise<void> {
    // Capacity held by something else in the process may have come back since the last look.
    this.fillSlots();
    const settlements = this.settlements;
    const pending = this.marks;
    this.settlements = [];
    this.marks = [];
    // An item that started and already ended since the last pass is settled with its start time
    // instead of being marked running first (settle.sql: no running row anyone could see).
    const ending = new Map(settlements.map((s, i) => [s.id, i]));
    const marks: Mark[] = [];
    for (const m of pending) {
      const i = ending.get(m.entry.item.id);
      if (i === undefined) marks.push(m);
      else settlements[i] = { ...settlements[i]!, startedAtMs: m.startedAtMs };
    }
    const run = this.stopping ? 0 : Math.max(0, this.freeSlots - this.queue.length);
    const ahead = this.stopping ? 0 : Math.max(0, this.localQueueSize - this.queue.length);
    if (settlements.length === 0 && marks.length === 0 && run === 0 && ahead === 0) {
      // Nothing left to write or claim (every slot busy): no pass is failing.
      this.passesWork();
      return;
    }
    let res: Awaited<ReturnType<typeof workerPass>>;
    try {
      this.counters.claimCalls++;
      res = await workerPass(this.db, {
        workerId: this.id,
        settlements,
        marks: marks.map((m) => ({ id: m.entry.item.id, leaseToken: m.entry.item.leaseToken })),
        maxDeferrals: this.config.rate_limits.max_deferrals,
        run,
        ahead,
        leaseSeconds: this.leaseSeconds,
      });
    } catch (err) {
      // Keep the marks (the fence makes a repeated mark harmless), and the settlements while the
      // database is away. Anything else refused the pass: its rows are settled one at a time,
      // so one row PostgreSQL cannot store fails alone instead of failing every pass after it.
      this.marks.unshift(...marks);
      // A pass past its timeout says nothing about its rows: they go out again in the next one.
      if (isDatabaseUnavailable(err) || isStatementTimeout(err) || isLockWait(err) || settlements.length === 0) this.settlements.unshift(...settlements);
      else await this.settleEach(settlements, err);
      throw err;
    }
    this.passesWork();
    this.counters.settled += res.settled.size;
    this.counters.lost += settlements.length - res.settled.size;
    for (const s of settlements) if (s.kind === "released" && res.settled.has(s.id)) this.counters.released++;
    recordSettlements(settlements, res.settled, this.log);
    // A refused mark: the lease expired, was lost or the item cancelled. The run stops and the row
    // is handed back (fenced: a lease another worker or a cancel took changes nothing).
    for (const m of marks)
      if (!res.marked.has(m.entry.item.id) && !m.entry.ended) {
        m.entry.controller.abort(leaseLost());
        this.end(m.entry, { kind: "released" });
      }
    const claimed = res.claimed;
    if (claimed.length === 0) return;
    this.counters.claimed += claimed.length;
    recordClaims(claimed, this.log);
    for (const [id, stored] of res.specs) if (!this.specs.has(id)) this.specs.set(id, readExecutionSpec(stored));
    while (this.specs.size > 1024) this.specs.delete(this.specs.keys().next().value as string);
    if (this.stopping) {
      // Claimed while stop() waited for this pass: stop() hands them back with the rest.
      this.queue.push(...claimed);
      return;
    }
    this.queue.push(...interleaveByBatch(claimed));
    this.fillSlots();
    // A full claim may have left more work: look again right away (one pass at a time).
    if (run > 0 && claimed.length >= run + ahead) this.kick();
  }

  /** The failure clock stops (onStuck may fire again after another full stretch of failures). */
  private passesWork(): void {
    this.failingSince = undefined;
    this.stuck = false;
    if (this.waitingSince !== undefined)
      this.log.info({ waited_ms: Date.now() - this.waitingSince }, "worker passes go on after waiting on a lock");
    this.waitingSince = undefined;
  }

  /**
   * A pass that gave up waiting for a lock another session holds (a `lock table`, a row held open
   * in psql, a long migration) failed through no fault of this worker, and a new worker would
   * wait on the same lock: it is retried at the next poll for as long as the lock is held, its
   * rows kept, the heartbeat going on, logged when the wait starts and every half minute, and it
   * never counts toward the restart of a worker whose passes keep failing.
   */
  private waitsOnLock(err: unknown): void {
    const now = Date.now();
    const starts = this.waitingSince === undefined;
    this.waitingSince ??= now;
    if (!starts && now - (this.lockWaitLoggedAt ?? 0) < LOCK_WAIT_LOG_MS) return;
    this.lockWaitLoggedAt = now;
    this.log.warn(
      { err, waiting_for_ms: now - this.waitingSince },
      "worker pass waits on a lock another session holds; retrying at the next poll (not a failure of this worker)",
    );
  }

  /** The fallback of a refused pass (settle.ts): the refusing items fail with `storage_refused`, the others settle. */
  private async settleEach(settlements: Settlement[], refusal: unknown): Promise<void> {
    this.log.warn({ err: refusal, settlements: settlements.length }, "worker pass refused; settling its rows one at a time");
    const each = await settleEach(this.db, {
      workerId: this.id,
      settlements,
      maxDeferrals: this.config.rate_limits.max_deferrals,
    });
    this.settlements.unshift(...each.unsettled);
    this.counters.settled += each.settled.size;
    this.counters.lost += each.written.length - each.settled.size;
    recordSettlements(each.written, each.settled, this.log);
    if (each.dropped.length)
      this.log.error({ item_ids: each.dropped }, "neither these items' results nor their failures could be stored; lease recovery takes them");
    // The marks and the claim go out again at once rather than at the next poll.
    this.kick();
  }

  /** Free slots take their next item from the local queue, without a round trip. */
  private fillSlots(): void {
    let free = this.freeSlots;
    while (free > 0 && this.queue.length > 0 && !this.stopping) {
      this.startItem(this.queue.shift()!);
      free--;
    }
  }

  private startItem(item: ClaimedItem): void {
    const entry: LocalItem = { item, controller: new AbortController(), done: Promise.resolve(), ended: false };
    this.running.set(item.id, entry);
    entry.done = this.runItem(entry).finally(() => {
      // The item may already be re-claimed (a retry) under a new entry; leave that one alone.
      if (this.running.get(item.id) === entry) this.running.delete(item.id);
      this.fillSlots();
      this.kick();
    });
  }

  /** Queues the one settlement of a local item. */
  private end(entry: LocalItem, s: DistributiveOmit<Settlement, "id" | "leaseToken">): void {
    if (entry.ended) return;
    entry.ended = true;
    this.settlements.push({ ...s, id: entry.item.id, leaseToken: entry.item.leaseToken } as Settlement);
  }

  private async runItem(entry: LocalItem): Promise<void> {
    const { item, controller } = entry;
    const spec = this.specs.get(item.batchId);
    if (!spec || spec instanceof Error) {
      this.end(entry, {
        kind: "failed",
        retryable: false,
        error: `cannot rebuild the execution boundary: ${spec instanceof Error ? spec.message : "execution spec missing"}`,
      });
      return;
    }
    // `running` is written as execution starts (after the capacity admitted it), in the next pass,
    // without waiting for it: the mark overlaps the model call instead of delaying it. A refused
    // mark (lease lost, item cancelled) aborts the run, and its settlement, if any, is fenced out
    // by the same lease.
    let marked = false;
    const onStarted = async () => {
      if (marked) return;
      marked = true;
      this.marks.push({ entry, startedAtMs: Date.now() });
      this.kick();
    };
    let result: Awaited<ReturnType<ItemExecutor>>;
    try {
      result = await this.executor({ item, workerId: this.id, spec, signal: controller.signal, onStarted });
    } catch (err) {
      if (controller.signal.aborted) return; // cancelled, lease lost or shutting down: no write
      if (isCapacityError(err) || isDatabaseUnavailable(err)) {
        this.end(entry, { kind: "released" });
        return;
      }
      this.end(entry, { kind: "failed", error: errorText(err) });
      return;
    }
    if (controller.signal.aborted) {
      // No settlement (the lease is gone or the worker stops), but the run itself happened.
      if (result.runRow)
        writeFinishedRunRow(this.db, result.runRow).catch((err) => this.log.warn({ err }, "could not write the run row"));
      return;
    }
    const b = this.config.subagent_batches;
    const ref = { id: item.id, leaseToken: item.leaseToken };
    if (!entry.ended) {
      entry.ended = true;
      this.settlements.push(
        settlementOf(ref, result, { maxResultChars: b.max_result_chars, previewMaxChars: b.result_preview_max_chars }),
      );
    }
  }

  private onNotify(payload: string): void {
    const event = parseBatchEvent(payload);
    if (!event || this.stopping) return;
    if (event.event === "cancel") {
      // Committed before the notification was delivered: every local item of the batch is cancelled.
      for (const l of this.running.values())
        if (l.item.batchId === event.batchId) l.controller.abort(leaseLost("the batch was cancelled"));
      this.queue = this.queue.filter((i) => i.batchId !== event.batchId);
      return;
    }
    this.providerLane?.kick();
    this.kick();
  }

  /** Skipped while passes fail or the loop stalls: a worker that cannot settle or claim must not read as alive. */
  private async beat(): Promise<void> {
    if (this.failingSince !== undefined) return;
    if (Date.now() - this.lastPassEndedAt > this.stallMs) return;
    try {
      await writeHeartbeat(this.db, { id: this.id, capacity: this.runtime.capacity.maxRunning, running: this.running.size });
    } catch (err) {
      this.log.warn({ err }, "heartbeat failed");
    }
  }

  private localRefs(): LeaseRef[] {
    return [...[...this.running.values()].map((l) => l.item), ...this.queue].map((i) => ({ id: i.id, leaseToken: i.leaseToken }));
  }

  /** Lost leases: running ones abort, queued ones are dropped (their rows are no longer ours). */
  private dropLost(ids: string[]): void {
    if (ids.length === 0) return;
    const lost = new Set(ids);
    for (const id of ids) this.running.get(id)?.controller.abort(leaseLost());
    this.queue = this.queue.filter((i) => !lost.has(i.id));
  }

  /** One statement extends every lease this worker holds, running or queued locally. */
  private async renew(): Promise<void> {
    if (this.stopping) return;
    const refs = this.localRefs();
    if (refs.length === 0) return;
    const { lost } = await renewLeases(this.db, { workerId: this.id, leaseSeconds: this.leaseSeconds, items: refs });
    this.dropLost(lost);
  }

  /** The poll: recovery of anyone's expired leases, a check that local leases are still held, then a pass. */
  private async maintain(): Promise<void> {
    if (this.stopping || this.outage.holding()) return;
    try {
      const recovered = await recoverExpiredLeases(this.db);
      recordLeaseRecoveries(recovered.requeued + recovered.failed);
      if (recovered.requeued + recovered.failed > 0) this.log.info(recovered, "recovered expired leases");
      // Calls nobody decided within tools.approval_timeout_seconds are denied (approvals.sql).
      const expired = await expireApprovals(this.db, this.config.tools.approval_timeout_seconds);
      if (expired > 0) this.log.info({ items: expired }, "denied tool calls that waited past the approval timeout");
      const refs = this.localRefs();
      if (refs.length) this.dropLost(await findLostLeases(this.db, { workerId: this.id, items: refs }));
      this.outage.succeeded();
    } finally {
      this.kick();
    }
  }
}

/**
 * How long the loop may go without a pass ending before it counts as stalled: the configured
 * bound, and never less than three polls (a pass is asked for at every poll).
 */
export function stallMsOf(config: FlotillaConfig): number {
  const b = config.subagent_batches;
  return Math.max(b.worker_stall_seconds * 1000, 3 * b.poll_interval_seconds * 1000);
}

/** The SQLSTATE of `err` or of an error in its cause chain (drizzle wraps the driver's) is one of `codes`. */
function hasCode(err: unknown, codes: readonly string[], depth = 0): boolean {
  if (!err || typeof err !== "object" || depth > 5) return false;
  const code = errorCodeOf(err);
  if (code && codes.includes(code)) return true;
  const cause = (err as { cause?: unknown }).cause;
  return cause !== undefined && cause !== err && hasCode(cause, codes, depth + 1);
}

/** PostgreSQL cancelled the statement at statement_timeout (57014) or lock_timeout (55P03). */
const isStatementTimeout = (err: unknown) => hasCode(err, ["57014", "55P03"]);

/**
 * Waiting on someone else: lock_timeout (55P03, lock_not_available) or chosen as a deadlock's
 * victim (40P01). The worker's statement_timeout stays above its lock_timeout (./main.ts), so a
 * lock wait ends as 55P03 and a statement_timeout is the pass's own slowness.
 */
const isLockWait = (err: unknown) => hasCode(err, ["55P03", "40P01"]);

/** How often a worker still waiting on a lock says so. */
const LOCK_WAIT_LOG_MS = 30_000;

/** Round-robin across batches, so slots taking from the local queue keep the claim's fair shares. */
function interleaveByBatch(items: ClaimedItem[]): ClaimedItem[] {
  const groups = new Map<string, ClaimedItem[]>();
  for (const i of items) {
    const g = groups.get(i.batchId);
    if (g) g.push(i);
    else groups.set(i.batchId, [i]);
  }
  const out: ClaimedItem[] = [];
  for (let k = 0; out.length < items.length; k++) for (const g of groups.values()) if (k < g.length) out.push(g[k]!);
  return out;
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
