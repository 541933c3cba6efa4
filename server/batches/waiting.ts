import { and, eq, inArray, sql } from "drizzle-orm";
import type { BatchEta, WaitingReason } from "@/lib/api/batches";
import { getConfig } from "@/server/config/load";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatchItemAttempts as attempts, subagentBatches } from "@/server/db/schema";
import { findCatalogEntry } from "@/server/models/catalog";
import { catalogEndpointKey } from "@/server/runtime/rate-limit";
import { livenessWindowSeconds } from "@/server/runtime/heartbeat";
import type { BatchRow } from "./types";

/**
 * Why a batch waits, and when it will be done, computed without scanning items: the batch's
 * own counters, the worker heartbeat table (a handful of rows), the shared rate-limit rows (one
 * per model endpoint) and, for the ETA, the batch's attempts finished in the recent window
 * (a range on subagent_batch_item_attempts_recent_idx, bounded by throughput × window; after
 * a retry reopened the batch, only what finished since).
 */

export interface LiveState {
  waitingReason: WaitingReason | null;
  waitingUntil: Date | null;
  waitingSince: Date | null;
  eta: BatchEta | null;
  /** The live workers' slots in all (each its subagent_runtime.max_running); null with none alive. */
  workerSlots: number | null;
}

/** Throughput is measured over this much recent time (or since the batch started, if later). */
export const ETA_WINDOW_SECONDS = 300;
/** Fewer finished items than this in the window say nothing about the rate: no ETA. */
export const ETA_MIN_FINISHED = 3;
/** A 429 this recent still counts as "at the rate limit" (a retry-after of 1 s passes between two polls). */
const RECENT_RATE_LIMIT_SECONDS = 5;
/** Batch calls held back by the limiter's horizon this recently: the batch runs at the provider's limit. */
const HELD_RECENT_SECONDS = 2;

export interface ClusterState {
  now: Date;
  liveWorkers: number;
  capacity: number;
  running: number;
  lastHeartbeatAt: Date | null;
  /** endpoint → the instant calls on it may start again (in the future, or a 429 within the last seconds). */
  rateLimits: { endpoint: string; until: Date }[];
}

const ACTIVE = new Set(["queued", "running", "paused"]);

export async function loadClusterState(db: DbOrTx, leaseSeconds: number): Promise<ClusterState> {
  const window = livenessWindowSeconds(leaseSeconds);
  const [w] = await db.execute<{
    now: Date;
    live: number;
    capacity: number;
    running: number;
    last: Date | null;
  }>(sql`
    select now() as now,
           count(*) filter (where alive)::int as live,
           coalesce(sum(capacity) filter (where alive), 0)::int as capacity,
           coalesce(sum(running) filter (where alive), 0)::int as running,
           max(last_heartbeat_at) as last
      from (select capacity, running, last_heartbeat_at,
                   stopped_at is null and last_heartbeat_at > now() - make_interval(secs => ${window}) as alive
              from worker_heartbeats where kind = 'worker') h`);
  const limits = await db.execute<{ endpoint: string; until: Date }>(sql`
    select endpoint,
           greatest(slow_until, next_request_at, next_token_at, next_input_token_at, next_output_token_at,
                    last_rate_limited_at + make_interval(secs => 1)) as until
      from model_rate_limits
     where slow_until > now() - make_interval(secs => ${RECENT_RATE_LIMIT_SECONDS})
        or greatest(next_request_at, next_token_at, next_input_token_at, next_output_token_at) > now() + interval '1 second'
        or last_rate_limited_at > now() - make_interval(secs => ${RECENT_RATE_LIMIT_SECONDS})
        or held_at > now() - make_interval(secs => ${HELD_RECENT_SECONDS})`);
  const now = new Date(w!.now);
  return {
    now,
    liveWorkers: Number(w!.live),
    capacity: Number(w!.capacity),
    running: Number(w!.running),
    lastHeartbeatAt: w!.last ? new Date(w!.last) : null,
    rateLimits: limits.map((r) => ({ endpoint: r.endpoint, until: new Date(r.until) })),
  };
}

/** The columns the waiting reason reads. */
export type WaitingInput = Pick<
  BatchRow,
  "status" | "pauseReason" | "queuedCount" | "pendingCount" | "leasedCount" | "runningCount" | "executionSpec"
>;

/** The shared rate-limit endpoint the batch's model calls go through (base URL + model id of its catalog entry). */
function specEndpoint(b: WaitingInput): string | undefined {
  const model = (b.executionSpec as { model?: { name?: unknown } }).model;
  if (typeof model?.name !== "string") return undefined;
  const entry = findCatalogEntry(getConfig(), model.name);
  return entry ? catalogEndpointKey(entry) : undefined;
}

/** Pure: the waiting reason of one batch given the cluster state. */
export function waitingFor(b: WaitingInput, c: ClusterState): Pick<LiveState, "waitingReason" | "waitingUntil" | "waitingSince"> {
  const none = { waitingReason: null, waitingUntil: null, waitingSince: null };
  if (!ACTIVE.has(b.status)) return none;
  if (b.status === "paused")
    return { ...none, waitingReason: b.pauseReason === "budget" || b.pauseReason === "quota" ? "budget" : "paused" };
  if (c.liveWorkers === 0) return { ...none, waitingReason: "no_worker", waitingSince: c.lastHeartbeatAt };
  const endpoint = specEndpoint(b);
  const limit = endpoint
    ? c.rateLimits.filter((r) => r.endpoint === endpoint).sort((x, y) => y.until.getTime() - x.until.getTime())[0]
    : undefined;
  if (limit)
    return { ...none, waitingReason: "rate_limited", waitingUntil: new Date(Math.max(limit.until.getTime(), c.now.getTime())) };
  const hasWork = b.queuedCount + b.pendingCount > 0;
  const moving = b.leasedCount + b.runningCount > 0;
  if (hasWork && !moving && c.running >= c.capacity) return { ...none, waitingReason: "capacity" };
  return none;
}

/** Waiting reasons and ETAs for a set of batches (two small queries plus one indexed range for the ETAs). */
export async function loadLiveStates(
  db: DbOrTx,
  args: { batches: BatchRow[]; leaseSeconds: number },
): Promise<Map<string, LiveState>> {
  const out = new Map<string, LiveState>();
  const active = args.batches.filter((b) => ACTIVE.has(b.status));
  if (active.length === 0) return out;
  const cluster = await loadClusterState(db, args.leaseSeconds);
  const ids = active.filter((b) => b.status === "running").map((b) => b.id);
  const recent = new Map<string, number>();
  if (ids.length > 0) {
    // Per batch, one index range on (batch_id, finished_at): the window, and for a batch a retry
    // reopened, only what finished since the retry.
    const rows = await db
      .select({ batchId: attempts.batchId, n: sql<number>`count(*)::int` })
      .from(subagentBatches)
      .innerJoin(attempts, eq(attempts.batchId, subagentBatches.id))
      .where(
        and(
          inArray(subagentBatches.id, ids),
          sql`${attempts.outcome} in ('succeeded', 'failed')`,
          sql`${attempts.finishedAt} > greatest(now() - make_interval(secs => ${ETA_WINDOW_SECONDS}), coalesce(${subagentBatches.reopenedAt}, '-infinity'))`,
        ),
      )
      .groupBy(attempts.batchId);
    for (const r of rows) recent.set(r.batchId, Number(r.n));
  }
  for (const b of active) {
    const waiting = waitingFor(b, cluster);
    // A batch at the provider's limit still moves: its rate and ETA are what the limit allows.
    const moving = waiting.waitingReason === null || waiting.waitingReason === "rate_limited";
    out.set(b.id, {
      ...waiting,
      eta: moving ? etaFor(b, recent.get(b.id) ?? 0, cluster.now) : null,
      workerSlots: cluster.liveWorkers > 0 ? cluster.capacity : null,
    });
  }
  return out;
}

/**
 * Pure: the ETA from `finished` items in the recent window; null unless enough finished to mean
 * something. The window starts at most at the batch's start, or at the retry that reopened it:
 * the idle time before a retry is not time the batch was running.
 */
export function etaFor(b: BatchRow, finished: number, now: Date): BatchEta | null {
  const remaining = b.total - b.succeededCount - b.failedCount - b.cancelledCount;
  const start = b.reopenedAt ?? b.startedAt;
  if (remaining <= 0 || finished < ETA_MIN_FINISHED || !start) return null;
  const sinceStart = (now.getTime() - start.getTime()) / 1000;
  const window = Math.max(1, Math.min(ETA_WINDOW_SECONDS, sinceStart));
  const perSecond = finished / window;
  return {
    window_seconds: Math.round(window),
    finished_in_window: finished,
    items_per_minute: Math.round(perSecond * 60 * 10) / 10,
    remaining,
    eta_seconds: Math.ceil(remaining / perSecond),
  };
}
