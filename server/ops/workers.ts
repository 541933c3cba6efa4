import { sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import type { LimitKind } from "@/server/runtime/provider-limits";
import { readLearnedLimits } from "@/server/runtime/rate-limit";

/**
 * The workers view: live and recently dead worker processes from their heartbeats, and the
 * batches each is working on from the item leases it holds. Worker rows are cluster-wide
 * (operational, no user content); batch details are shown only for the viewer's own batches —
 * leases on other users' batches are folded into one count.
 */

export interface WorkerLeaseView {
  batch_id: string;
  thread_id: string;
  subagent: string;
  batch_status: string;
  leased: number;
  running: number;
}

export interface WorkerView {
  id: string;
  host: string;
  pid: number;
  version: string;
  capacity: number;
  /** Items the worker said it was executing at its last heartbeat. */
  running: number;
  alive: boolean;
  started_at: string;
  last_heartbeat_at: string;
  stopped_at: string | null;
  /** The viewer's batches this worker holds leases on. */
  batches: WorkerLeaseView[];
  /** Leased + running items of other users' batches held by this worker. */
  other_items: number;
}

const iso = (v: unknown): string => (v instanceof Date ? v : new Date(String(v))).toISOString();

export async function listWorkers(
  db: DbOrTx,
  args: { userId: string; livenessSeconds: number; recentSeconds?: number; limit?: number },
): Promise<WorkerView[]> {
  const recent = args.recentSeconds ?? 24 * 3600;
  const limit = args.limit ?? 100;
  const workers = (await db.execute(sql`
    select id, host, pid, version, capacity, running, started_at, last_heartbeat_at, stopped_at,
           (stopped_at is null and last_heartbeat_at > now() - make_interval(secs => ${args.livenessSeconds})) as alive
    from worker_heartbeats
    where kind = 'worker' and last_heartbeat_at > now() - make_interval(secs => ${recent})
    order by alive desc, last_heartbeat_at desc
    limit ${limit}`)) as unknown as Array<Record<string, unknown>>;
  if (workers.length === 0) return [];
  const ids = workers.map((w) => String(w.id));

  // Uses the partial lease index (status in leased/running): bounded by what is in flight.
  const leases = (await db.execute(sql`
    select i.lease_owner, i.batch_id, b.user_id, b.thread_id, b.subagent, b.status as batch_status,
           count(*) filter (where i.status = 'leased')::int as leased,
           count(*) filter (where i.status = 'running')::int as running
    from subagent_batch_items i
    join subagent_batches b on b.id = i.batch_id
    where i.status in ('leased', 'running') and i.lease_owner in (${sql.join(
      ids.map((id) => sql`${id}`),
      sql`, `,
    )})
    group by i.lease_owner, i.batch_id, b.user_id, b.thread_id, b.subagent, b.status
    order by i.batch_id`)) as unknown as Array<Record<string, unknown>>;

  return workers.map((w) => {
    const mine: WorkerLeaseView[] = [];
    let other = 0;
    for (const l of leases) {
      if (l.lease_owner !== w.id) continue;
      if (l.user_id === args.userId)
        mine.push({
          batch_id: String(l.batch_id),
          thread_id: String(l.thread_id),
          subagent: String(l.subagent),
          batch_status: String(l.batch_status),
          leased: Number(l.leased),
          running: Number(l.running),
        });
      else other += Number(l.leased) + Number(l.running);
    }
    return {
      id: String(w.id),
      host: String(w.host),
      pid: Number(w.pid),
      version: String(w.version),
      capacity: Number(w.capacity),
      running: Number(w.running),
      alive: w.alive === true,
      started_at: iso(w.started_at),
      last_heartbeat_at: iso(w.last_heartbeat_at),
      stopped_at: w.stopped_at ? iso(w.stopped_at) : null,
      batches: mine,
      other_items: other,
    };
  });
}

export interface EndpointView {
  endpoint: string;
  requests: number;
  tokens: number;
  rate_limited: number;
  last_rate_limited_at: string | null;
  /** Milliseconds every process still holds back after a provider 429 (0 = none). */
  slowed_for_ms: number;
  /** The limits the provider's own headers state, per kind, and the share of each this key may use now. */
  learned: { kind: LimitKind; per_minute: number; share: number }[];
}

/** The shared rate-limit rows (one per model endpoint): operational totals, no user content. */
export async function listRateLimitEndpoints(db: DbOrTx, args: { limit?: number } = {}): Promise<EndpointView[]> {
  const rows = (await db.execute(sql`
    select endpoint, requests, tokens, rate_limited, last_rate_limited_at,
           greatest(0, extract(epoch from (slow_until - now())) * 1000) as slowed_for_ms
    from model_rate_limits order by updated_at desc limit ${args.limit ?? 20}`)) as unknown as Array<Record<string, unknown>>;
  const learned = await readLearnedLimits(db);
  return rows.map((r) => ({
    endpoint: String(r.endpoint),
    requests: Number(r.requests),
    tokens: Number(r.tokens),
    rate_limited: Number(r.rate_limited),
    last_rate_limited_at: r.last_rate_limited_at ? iso(r.last_rate_limited_at) : null,
    slowed_for_ms: Math.round(Number(r.slowed_for_ms ?? 0)),
    learned: learned
      .filter((l) => l.endpoint === r.endpoint)
      .map((l) => ({ kind: l.kind, per_minute: l.perMinute, share: l.share })),
  }));
}
