import { sql } from "drizzle-orm";
import { tokenCount } from "@/lib/api/subagents";
import { type DbOrTx, driverOf } from "@/server/db/client";
import { storableJson } from "@/server/db/storable";
import type { ItemStatus } from "@/server/db/schema/batches";
import { type ExecutionSpec, parseExecutionSpec } from "./spec";
import type { Settlement } from "./settlement";
import type { ClaimedItem, LeaseRef } from "./types";

/**
 * Worker-side transitions. These are not owner-scoped: the caller is a worker acting on rows
 * it claimed. Each is one round trip to a function whose text lives in one file of
 * server/batches/sql/ (claim.sql, mark-running.sql, renew.sql, settle.sql, recover.sql,
 * worker-pass.sql), so batch row locks are held for microseconds, never across a network hop,
 * and every write after the claim is fenced by lease owner + token.
 *
 * They go straight to postgres.js as prepared statements (constant text, parameters cast from
 * text), not through drizzle's query builder: measured on issue 22, building and parsing each
 * statement anew was ~10 % of the worker's CPU per item.
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

/** A claimed item's row as the transition functions return it (claim.sql, provider-lane.sql). */
export type ClaimRow = {
  item_id: string;
  batch_id: string;
  item_key: string;
  item_position: number;
  prompt: string;
  lease_token: string | number;
  attempt: number;
  expected: unknown;
  feedback: string | null;
  resume: boolean | null;
  generation: number | null;
};

export function toClaimed(r: ClaimRow): ClaimedItem {
  return {
    id: r.item_id,
    batchId: r.batch_id,
    itemKey: r.item_key,
    position: r.item_position,
    prompt: r.prompt,
    leaseToken: Number(r.lease_token),
    attempt: r.attempt,
    expected: r.expected ?? null,
    feedback: r.feedback ?? null,
    resume: r.resume === true,
    generation: r.generation ?? 1,
  };
}

/** The settle's jsonb: whatever text the attempt produced is stored (storable.ts), so it cannot refuse the pass. */
function settlementPayload(settlements: readonly Settlement[]): string {
  return storableJson(
    settlements.map((s) => ({
      // Typed results and checks: keys only when set (absent keys read as null in settle.sql).
      ...(s.kind === "succeeded" || s.kind === "failed" ? { output: s.output, checks: s.checks, verdict: s.verdict } : {}),
      // Durable steps: only an attempt that stored or resumed steps says so (settle.sql drops them).
      ...(s.steps ? { steps: true } : {}),
      id: s.id,
      token: s.leaseToken,
      kind: s.kind,
      result: s.kind === "succeeded" ? s.result : null,
      preview: s.kind === "succeeded" ? s.preview : null,
      error: s.kind === "failed" || s.kind === "deferred" || s.kind === "awaiting_approval" ? s.error : null,
      model: "model" in s ? (s.model ?? null) : null,
      stop_reason: "stopReason" in s ? (s.stopReason ?? null) : null,
      input_tokens: "usage" in s && s.usage ? Math.max(0, Math.round(s.usage.inputTokens)) : 0,
      output_tokens: "usage" in s && s.usage ? Math.max(0, Math.round(s.usage.outputTokens)) : 0,
      cached_input_tokens: "usage" in s && s.usage ? tokenCount(s.usage.cachedInputTokens) : 0,
      cache_write_tokens: "usage" in s && s.usage ? tokenCount(s.usage.cacheWriteTokens) : 0,
      // Absent: settle.sql prices the tokens at the batch's snapshot.
      ...("usage" in s && Number.isFinite(s.usage?.costUsd) ? { cost_usd: Math.max(0, s.usage!.costUsd!) } : {}),
      retryable: s.kind === "failed" ? s.retryable !== false : true,
      delay_ms: s.kind === "deferred" || s.kind === "failed" ? Math.max(0, Math.round(s.delayMs ?? 0)) : 0,
      run_id: s.runId ?? null,
      started_ms: s.startedAtMs ?? null,
      run_row: s.runRow ?? null,
      ...(s.kind === "awaiting_approval"
        ? {
            approvals: s.approvals.map((a) => ({
              approval_id: a.approvalId,
              tool_call_id: a.toolCallId,
              tool_name: a.toolName,
              input: a.input ?? null,
            })),
          }
        : {}),
    })),
  );
}

/**
 * Promotes and claims up to `limit` items for `workerId` across active batches (users first,
 * then batches, equal shares), honouring each batch's live window and running limit (leased +
 * running across all workers). Paused, cancelled and finished batches are never claimed. Each
 * claim takes one attempt and a fresh fencing token; the rows stay `leased` until markRunning.
 */
export async function claimItems(
  db: DbOrTx,
  args: { workerId: string; limit: number; leaseSeconds: number; maxBatches?: number },
): Promise<ClaimedItem[]> {
  if (args.limit <= 0) return [];
  const rows = await driverOf(db)<ClaimRow[]>`
    select * from flotilla_claim(${args.workerId}::text, ${Math.floor(args.limit)}::int, 0, ${args.leaseSeconds}::float8, ${args.maxBatches ?? 8}::int)`;
  return rows.map(toClaimed);
}

export interface WorkerPassResult {
  /** New status of every settled item (fenced-out settlements are absent). */
  settled: Map<string, ItemStatus>;
  /** Items of `marks` that moved to running; any other must not run. */
  marked: Set<string>;
  /** Claimed (leased) for the free slots first, then the local queue: marked running when a slot starts one. */
  claimed: ClaimedItem[];
  /** The execution spec of every batch claimed from, as stored (parse with parseExecutionSpec). */
  specs: Map<string, unknown>;
}

/**
 * One round trip of the worker loop (worker-pass.sql): mark `marks` running, settle
 * `settlements`, claim `run` items for free slots and up to `ahead` for the local queue (from
 * batches' spare room only). While it holds the locks of the batches it
 * settled or marked it does not wait for a batch another worker holds, so the claim can come
 * back empty under contention.
 */
export async function workerPass(
  db: DbOrTx,
  args: {
    workerId: string;
    settlements: readonly Settlement[];
    marks: readonly LeaseRef[];
    maxDeferrals: number;
    run: number;
    ahead: number;
    leaseSeconds: number;
    maxBatches?: number;
  },
): Promise<WorkerPassResult> {
  checkRefs(args.settlements);
  checkRefs(args.marks);
  const rows = await driverOf(db)<
    (ClaimRow & { kind: "settled" | "marked" | "claimed"; status: ItemStatus; execution_spec: unknown })[]
  >`
    select * from flotilla_worker_pass(${args.workerId}::text, ${settlementPayload(args.settlements)}::text::jsonb,
      ${arrayLiteral(args.marks.map((m) => m.id))}::text::uuid[], ${arrayLiteral(args.marks.map((m) => m.leaseToken))}::text::bigint[],
      ${args.maxDeferrals}::int, ${Math.max(0, Math.floor(args.run))}::int, ${Math.max(0, Math.floor(args.ahead))}::int,
      ${args.leaseSeconds}::float8, ${args.maxBatches ?? 8}::int)
  `;
  const out: WorkerPassResult = { settled: new Map(), marked: new Set(), claimed: [], specs: new Map() };
  for (const r of rows) {
    if (r.kind === "settled") out.settled.set(r.item_id, r.status);
    else if (r.kind === "marked") out.marked.add(r.item_id);
    else {
      out.claimed.push(toClaimed(r));
      if (r.execution_spec != null) out.specs.set(r.batch_id, r.execution_spec);
    }
  }
  // The claim's own statements see batches committed after the pass's outer statement began, whose
  // snapshot then reads no spec for them (seen in bench/workspace as items failed with "execution
  // spec missing"): a new statement reads those.
  const missing = [...new Set(out.claimed.map((c) => c.batchId))].filter((id) => !out.specs.has(id));
  if (missing.length > 0) {
    const specs = await driverOf(db)<{ id: string; execution_spec: unknown }[]>`
      select id, execution_spec from subagent_batches where id = any(${arrayLiteral(missing)}::text::uuid[])`;
    for (const r of specs) out.specs.set(r.id, r.execution_spec);
  }
  return out;
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
  const rows = await driverOf(db)<{ item_id: string }[]>`
    select item_id from flotilla_mark_running(
      ${args.workerId}::text,
      ${arrayLiteral(args.items.map((i) => i.id))}::text::uuid[],
      ${arrayLiteral(args.items.map((i) => i.leaseToken))}::text::bigint[],
      ${args.leaseSeconds}::float8)
  `;
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
  const rows = await driverOf(db)<{ item_id: string; renewed: boolean; lost: boolean }[]>`
    select * from flotilla_renew(${args.workerId}::text, ${arrayLiteral(args.items.map((i) => i.id))}::text::uuid[],
      ${arrayLiteral(args.items.map((i) => i.leaseToken))}::text::bigint[], ${args.leaseSeconds}::float8)
  `;
  const renewed: string[] = [];
  const lost: string[] = [];
  for (const row of rows) {
    if (row.renewed) renewed.push(row.item_id);
    else if (row.lost) lost.push(row.item_id);
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
  const rows = await driverOf(db)<{ id: string }[]>`
    select r.id from unnest(${arrayLiteral(args.items.map((i) => i.id))}::text::uuid[],
                            ${arrayLiteral(args.items.map((i) => i.leaseToken))}::text::bigint[]) as r(id, token)
     where not exists (
       select 1 from subagent_batch_items i
        where i.id = r.id and i.lease_owner = ${args.workerId}::text and i.lease_token = r.token
          and i.status in ('leased', 'running'))
  `;
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
  const rows = await driverOf(db)<{ item_id: string; new_status: ItemStatus }[]>`
    select item_id, new_status from flotilla_settle(${args.workerId}::text, ${settlementPayload(args.settlements)}::text::jsonb, ${args.maxDeferrals}::int)
  `;
  return new Map(rows.map((r) => [r.item_id, r.new_status]));
}

/**
 * Leases whose holder stopped renewing go back to queued (recover.sql); a running one at
 * max_attempts fails with an error that says so. Safe to call from every worker.
 */
export async function recoverExpiredLeases(
  db: DbOrTx,
  args: { limit?: number } = {},
): Promise<{ requeued: number; failed: number }> {
  const rows = await driverOf(db)<{ new_status: ItemStatus }[]>`select new_status from flotilla_recover(${args.limit ?? 500}::int)`;
  let failed = 0;
  for (const r of rows) if (r.new_status === "failed") failed++;
  return { requeued: rows.length - failed, failed };
}

/** An execution spec as stored, or the reason it cannot be rebuilt. */
export function readExecutionSpec(stored: unknown): ExecutionSpec | Error {
  try {
    return parseExecutionSpec(stored);
  } catch (err) {
    return err as Error;
  }
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
  return recoverUntilNoneLeft(db);
}

/**
 * For `npm start`'s supervisor, when a worker it started has exited without handing its rows
 * back (its watchdog's SIGKILL, an out-of-memory kill, a crash): that process writes nothing
 * more, so the leases it held under `instanceId` (the id the supervisor gave it) are expired and
 * recovered now rather than after subagent_batches.lease_seconds (120 s by default). Never by
 * host and pid: another live worker (another container with the same hostname) may have both.
 */
export async function recoverLeasesOfDeadWorker(db: DbOrTx, args: { instanceId: string }): Promise<{ requeued: number; failed: number }> {
  await db.execute(sql`
    update worker_heartbeats set stopped_at = last_heartbeat_at, running = 0
     where id = ${args.instanceId} and stopped_at is null`);
  await db.execute(sql`
    update subagent_batch_items set lease_expires_at = now() - interval '1 millisecond'
     where lease_owner = ${args.instanceId} and status in ('leased', 'running') and lease_expires_at > now()`);
  return recoverUntilNoneLeft(db);
}

async function recoverUntilNoneLeft(db: DbOrTx): Promise<{ requeued: number; failed: number }> {
  const total = { requeued: 0, failed: 0 };
  for (;;) {
    const r = await recoverExpiredLeases(db);
    total.requeued += r.requeued;
    total.failed += r.failed;
    if (r.requeued + r.failed === 0) return total;
  }
}
