import { sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import type { ItemStatus } from "@/server/db/schema/batches";
import { type ExecutionSpec, parseExecutionSpec } from "./spec";
import type { ClaimedItem, LeaseRef, Settlement } from "./types";

/**
 * Worker-side transitions. These are not owner-scoped: the caller is a worker acting on rows
 * it claimed. Each is one round trip to a PL/pgSQL function (drizzle/0001_batch_engine.sql)
 * so batch row locks are held for microseconds, never across a network hop, and every write
 * after the claim is fenced by lease owner + token.
 */

/** Postgres array literal for uuid[] / bigint[] parameters (values are uuids and integers only). */
function arrayLiteral(values: readonly (string | number)[]): string {
  return `{${values.join(",")}}`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function checkRefs(items: readonly LeaseRef[]): void {
  for (const it of items)
    if (!UUID.test(it.id) || !Number.isSafeInteger(it.leaseToken)) throw new Error(`invalid lease reference ${it.id}`);
}

type ClaimRow = {
  item_id: string;
  batch_id: string;
  item_key: string;
  item_position: number;
  prompt: string;
  lease_token: string | number;
  attempt: number;
};

function toClaimed(r: ClaimRow): ClaimedItem {
  return {
    id: r.item_id,
    batchId: r.batch_id,
    itemKey: r.item_key,
    position: r.item_position,
    prompt: r.prompt,
    leaseToken: Number(r.lease_token),
    attempt: r.attempt,
  };
}

function settlementPayload(settlements: readonly Settlement[]): string {
  return JSON.stringify(
    settlements.map((s) => ({
      id: s.id,
      token: s.leaseToken,
      kind: s.kind,
      result: s.kind === "succeeded" ? s.result : null,
      preview: s.kind === "succeeded" ? s.preview : null,
      error: s.kind === "failed" || s.kind === "deferred" ? s.error : null,
      model: "model" in s ? (s.model ?? null) : null,
      stop_reason: "stopReason" in s ? (s.stopReason ?? null) : null,
      input_tokens: "usage" in s && s.usage ? Math.max(0, Math.round(s.usage.inputTokens)) : 0,
      output_tokens: "usage" in s && s.usage ? Math.max(0, Math.round(s.usage.outputTokens)) : 0,
      retryable: s.kind === "failed" ? s.retryable !== false : true,
      delay_ms: s.kind === "deferred" || s.kind === "failed" ? Math.max(0, Math.round(s.delayMs ?? 0)) : 0,
      run_id: s.runId ?? null,
    })),
  );
}

/**
 * Promotes and claims up to `limit` items for `workerId` across active batches (fair
 * round-robin by last claim, equal shares), honouring each batch's live window and running
 * limit (leased + running across all workers). Paused, cancelled and finished batches are
 * never claimed. Each claim takes one attempt and a fresh fencing token.
 */
export async function claimItems(
  db: DbOrTx,
  args: { workerId: string; limit: number; leaseSeconds: number; maxBatches?: number },
): Promise<ClaimedItem[]> {
  if (args.limit <= 0) return [];
  const rows = await db.execute<ClaimRow>(
    sql`select * from flotilla_claim_items(${args.workerId}, ${Math.floor(args.limit)}::int, ${args.leaseSeconds}::float8, ${args.maxBatches ?? 8}::int)`,
  );
  return rows.map(toClaimed);
}

/**
 * A worker's completions and its next claim in one transaction (one round trip, one commit).
 * While it holds the locks of the batches it settled it does not wait for a batch another
 * worker holds, so `claimed` can come back empty under contention: call claimItems then.
 */
export async function settleAndClaim(
  db: DbOrTx,
  args: {
    workerId: string;
    settlements: readonly Settlement[];
    maxDeferrals: number;
    limit: number;
    leaseSeconds: number;
    maxBatches?: number;
  },
): Promise<{ settled: Map<string, ItemStatus>; claimed: ClaimedItem[] }> {
  checkRefs(args.settlements);
  const rows = await db.execute<ClaimRow & { settled_status: ItemStatus | null }>(sql`
    select * from flotilla_settle_and_claim(${args.workerId}, ${settlementPayload(args.settlements)}::jsonb,
      ${args.maxDeferrals}::int, ${Math.max(0, Math.floor(args.limit))}::int, ${args.leaseSeconds}::float8, ${args.maxBatches ?? 8}::int)
  `);
  const settled = new Map<string, ItemStatus>();
  const claimed: ClaimedItem[] = [];
  for (const r of rows) {
    if (r.settled_status) settled.set(r.item_id, r.settled_status);
    else claimed.push(toClaimed(r));
  }
  return { settled, claimed };
}

/**
 * leased → running for the given leases, written when execution really starts. Returns the
 * ids that moved; an item whose lease expired, was cancelled or re-claimed is not among them
 * and must not run.
 */
export async function markRunning(
  db: DbOrTx,
  args: { workerId: string; leaseSeconds: number; items: readonly LeaseRef[] },
): Promise<Set<string>> {
  if (args.items.length === 0) return new Set();
  checkRefs(args.items);
  const rows = await db.execute<{ item_id: string }>(sql`
    select item_id from flotilla_mark_running(
      ${args.workerId},
      ${arrayLiteral(args.items.map((i) => i.id))}::uuid[],
      ${arrayLiteral(args.items.map((i) => i.leaseToken))}::bigint[],
      ${args.leaseSeconds}::float8)
  `);
  return new Set(rows.map((r) => r.item_id));
}

/**
 * Extends every given lease this worker still holds in one statement. `lost` are leases that
 * are gone (expired, cancelled, re-claimed, finished): the worker must abort those runs. Rows
 * locked by a concurrent transition are skipped this time and reported in neither list.
 */
export async function renewLeases(
  db: DbOrTx,
  args: { workerId: string; leaseSeconds: number; items: readonly LeaseRef[] },
): Promise<{ renewed: string[]; lost: string[] }> {
  if (args.items.length === 0) return { renewed: [], lost: [] };
  checkRefs(args.items);
  const ids = arrayLiteral(args.items.map((i) => i.id));
  const tokens = arrayLiteral(args.items.map((i) => i.leaseToken));
  const rows = await db.execute<{ id: string; renewed: boolean; held: boolean }>(sql`
    with r as (select * from unnest(${ids}::uuid[], ${tokens}::bigint[]) as r(id, token)),
    upd as (
      update subagent_batch_items it
         set lease_expires_at = now() + make_interval(secs => ${args.leaseSeconds}::float8)
       where it.id in (
         select i.id from subagent_batch_items i join r on r.id = i.id
          where i.lease_owner = ${args.workerId} and i.lease_token = r.token
            and i.status in ('leased', 'running') and i.lease_expires_at > now()
          for update of i skip locked)
      returning it.id
    )
    select r.id,
           exists (select 1 from upd where upd.id = r.id) as renewed,
           exists (select 1 from subagent_batch_items i
                    where i.id = r.id and i.lease_owner = ${args.workerId} and i.lease_token = r.token
                      and i.status in ('leased', 'running') and i.lease_expires_at > now()) as held
      from r
  `);
  const renewed: string[] = [];
  const lost: string[] = [];
  for (const row of rows) {
    if (row.renewed) renewed.push(row.id);
    else if (!row.held) lost.push(row.id);
  }
  return { renewed, lost };
}

/**
 * Which of these leases this worker no longer holds (cancelled, expired and recovered,
 * re-claimed, finished). A read-only check a worker runs every poll so a cancel aborts
 * in-flight model calls within one poll interval.
 */
export async function findLostLeases(
  db: DbOrTx,
  args: { workerId: string; items: readonly LeaseRef[] },
): Promise<string[]> {
  if (args.items.length === 0) return [];
  checkRefs(args.items);
  const rows = await db.execute<{ id: string }>(sql`
    select r.id from unnest(${arrayLiteral(args.items.map((i) => i.id))}::uuid[],
                            ${arrayLiteral(args.items.map((i) => i.leaseToken))}::bigint[]) as r(id, token)
     where not exists (
       select 1 from subagent_batch_items i
        where i.id = r.id and i.lease_owner = ${args.workerId} and i.lease_token = r.token
          and i.status in ('leased', 'running'))
  `);
  return rows.map((r) => r.id);
}

/**
 * Ends held attempts in one statement (see Settlement for the kinds). Fenced: entries whose
 * lease this worker no longer holds change nothing and are absent from the returned map,
 * which gives the new status of every item that moved.
 */
export async function settleItems(
  db: DbOrTx,
  args: { workerId: string; settlements: readonly Settlement[]; maxDeferrals: number },
): Promise<Map<string, ItemStatus>> {
  if (args.settlements.length === 0) return new Map();
  checkRefs(args.settlements);
  const rows = await db.execute<{ item_id: string; new_status: ItemStatus }>(sql`
    select item_id, new_status from flotilla_settle_items(${args.workerId}, ${settlementPayload(args.settlements)}::jsonb, ${args.maxDeferrals}::int)
  `);
  return new Map(rows.map((r) => [r.item_id, r.new_status]));
}

/** succeeded / failed for one held item; false when the lease was no longer held (nothing changed). */
export async function finalizeItem(
  db: DbOrTx,
  args: { workerId: string; maxDeferrals: number; settlement: Extract<Settlement, { kind: "succeeded" | "failed" }> },
): Promise<boolean> {
  const moved = await settleItems(db, { workerId: args.workerId, settlements: [args.settlement], maxDeferrals: args.maxDeferrals });
  return moved.has(args.settlement.id);
}

/** Refused by local capacity: back to queued without consuming the attempt. */
export async function releaseItem(db: DbOrTx, args: { workerId: string } & LeaseRef): Promise<boolean> {
  const moved = await settleItems(db, {
    workerId: args.workerId,
    settlements: [{ kind: "released", id: args.id, leaseToken: args.leaseToken }],
    maxDeferrals: 0,
  });
  return moved.has(args.id);
}

/** Rate limited: back to queued, claimable after delayMs, attempt refunded up to maxDeferrals times. */
export async function deferItem(
  db: DbOrTx,
  args: { workerId: string; delayMs: number; error: string; maxDeferrals: number } & LeaseRef,
): Promise<boolean> {
  const moved = await settleItems(db, {
    workerId: args.workerId,
    settlements: [{ kind: "deferred", id: args.id, leaseToken: args.leaseToken, delayMs: args.delayMs, error: args.error }],
    maxDeferrals: args.maxDeferrals,
  });
  return moved.has(args.id);
}

/**
 * Leases whose holder stopped renewing go back to queued with the attempt they used; at
 * max_attempts the item fails with an error that says so. Safe to call from every worker.
 */
export async function recoverExpiredLeases(
  db: DbOrTx,
  args: { limit?: number } = {},
): Promise<{ requeued: number; failed: number }> {
  const rows = await db.execute<{ new_status: ItemStatus }>(
    sql`select new_status from flotilla_recover_expired_leases(${args.limit ?? 500}::int)`,
  );
  let failed = 0;
  for (const r of rows) if (r.new_status === "failed") failed++;
  return { requeued: rows.length - failed, failed };
}

/** Execution specs of the given batches (immutable; workers cache them). */
export async function getExecutionSpecs(
  db: DbOrTx,
  args: { batchIds: readonly string[] },
): Promise<Map<string, ExecutionSpec | Error>> {
  const out = new Map<string, ExecutionSpec | Error>();
  if (args.batchIds.length === 0) return out;
  const rows = await db.execute<{ id: string; execution_spec: unknown }>(sql`
    select id, execution_spec from subagent_batches where id = any(${arrayLiteral([...args.batchIds])}::uuid[])
  `);
  for (const r of rows) {
    try {
      out.set(r.id, parseExecutionSpec(r.execution_spec));
    } catch (err) {
      out.set(r.id, err as Error);
    }
  }
  return out;
}

/**
 * For `npm start` with the embedded database, which listens on 127.0.0.1 only: when it boots,
 * no worker of the previous run can still be alive, so every lease it left (a terminal's Ctrl-C
 * also reaches PostgreSQL, which may shut down before a worker hands its rows back) is expired
 * now and recovered at once instead of after a full lease, and their heartbeats say stopped.
 */
export async function recoverLeasesOfPreviousRun(db: DbOrTx): Promise<{ requeued: number; failed: number }> {
  await db.execute(sql`
    update subagent_batch_items set lease_expires_at = now() - interval '1 millisecond'
     where status in ('leased', 'running') and lease_expires_at > now()`);
  await db.execute(sql`update worker_heartbeats set stopped_at = last_heartbeat_at, running = 0 where stopped_at is null`);
  const total = { requeued: 0, failed: 0 };
  for (;;) {
    const r = await recoverExpiredLeases(db);
    total.requeued += r.requeued;
    total.failed += r.failed;
    if (r.requeued + r.failed === 0) return total;
  }
}
