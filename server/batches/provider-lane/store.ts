import { type DbOrTx, driverOf } from "@/server/db/client";
import type { ProviderBatchState } from "@/server/db/schema";
import { toClaimed } from "../claim";
import type { ClaimedItem } from "../types";

/**
 * The provider lane's transitions (server/batches/sql/provider-lane.sql), one round trip each,
 * as worker-side statements (not owner-scoped: the caller is a worker acting on rows it holds).
 * Every write to a provider_batches row after the take is fenced by its lease owner.
 */

export type BatchProvider = "openai" | "anthropic";

/** An item taken into a new provider batch. */
export interface TakenItem {
  id: string;
  prompt: string;
  attempt: number;
  feedback: string | null;
}

export interface Taken {
  providerBatchId: string;
  batchId: string;
  items: TakenItem[];
}

/**
 * Up to `limit` claimable items of one provider_batch batch (not paused) into a new provider
 * batch `submitting`, leased to `owner`. Null when no batch has any.
 */
export async function takeForProvider(db: DbOrTx, args: { owner: string; limit: number; leaseSeconds: number }): Promise<Taken | null> {
  const rows = await driverOf(db)<{ provider_batch_id: string; batch_id: string; item_id: string; prompt: string; attempt: number; feedback: string | null }[]>`
    select * from flotilla_provider_take(${args.owner}::text, ${Math.floor(args.limit)}::int, ${args.leaseSeconds}::float8)`;
  if (rows.length === 0) return null;
  return {
    providerBatchId: rows[0]!.provider_batch_id,
    batchId: rows[0]!.batch_id,
    items: rows.map((r) => ({ id: r.item_id, prompt: r.prompt, attempt: r.attempt, feedback: r.feedback })),
  };
}

/**
 * The item_keys of taken items (the take hands over none), by item id: what a batch with examples
 * needs to leave an item's own answer out of its examples (server/batches/examples.ts).
 */
export async function takenItemKeys(db: DbOrTx, ids: readonly string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const rows = await driverOf(db)<{ id: string; item_key: string }[]>`
    select id, item_key from subagent_batch_items where id = any(${`{${ids.join(",")}}`}::uuid[])`;
  return new Map(rows.map((r) => [r.id, r.item_key]));
}

/** A provider batch this worker now holds under its lease. */
export interface LeasedProviderBatch {
  id: string;
  batchId: string;
  provider: BatchProvider;
  externalId: string | null;
  inputFileId: string | null;
  state: ProviderBatchState;
  polls: number;
}

/** Provider batches due for a poll, leased to `owner` (a lapsed lease is taken over). */
export async function leaseDueProviderBatches(
  db: DbOrTx,
  args: { owner: string; leaseSeconds: number; limit: number },
): Promise<LeasedProviderBatch[]> {
  const rows = await driverOf(db)<{ id: string; batch_id: string; provider: string; external_id: string | null; input_file_id: string | null; state: ProviderBatchState; polls: number }[]>`
    select * from flotilla_provider_lease(${args.owner}::text, ${args.leaseSeconds}::float8, ${Math.floor(args.limit)}::int)`;
  return rows.map((r) => ({
    id: r.id,
    batchId: r.batch_id,
    provider: r.provider === "openai" ? "openai" : "anthropic",
    externalId: r.external_id,
    inputFileId: r.input_file_id,
    state: r.state,
    polls: r.polls,
  }));
}

export interface ProviderBatchUpdate {
  state?: ProviderBatchState;
  externalId?: string;
  inputFileId?: string;
  providerStatus?: string;
  counts?: { succeeded: number; errored: number; expired: number; cancelled: number };
  /** Seconds until the next poll; the lease is given up with it (another worker may take the next poll). */
  nextPollSeconds?: number;
  lastError?: string | null;
}

/**
 * Writes what a poll learned, fenced by the lease. With `nextPollSeconds` the lease is released
 * (any worker may take the next poll); without it the lease is extended. False: the lease is gone.
 */
export async function updateProviderBatch(
  db: DbOrTx,
  args: { owner: string; id: string; leaseSeconds: number; update: ProviderBatchUpdate },
): Promise<boolean> {
  const u = args.update;
  const release = u.nextPollSeconds !== undefined;
  const ended = u.state === "ended" || u.state === "settled";
  const rows = await driverOf(db)`
    update provider_batches set
      state = coalesce(${u.state ?? null}::text, state),
      external_id = coalesce(${u.externalId ?? null}::text, external_id),
      input_file_id = coalesce(${u.inputFileId ?? null}::text, input_file_id),
      provider_status = coalesce(${u.providerStatus ?? null}::text, provider_status),
      succeeded = coalesce(${u.counts?.succeeded ?? null}::int, succeeded),
      errored = coalesce(${u.counts?.errored ?? null}::int, errored),
      expired = coalesce(${u.counts?.expired ?? null}::int, expired),
      cancelled = coalesce(${u.counts?.cancelled ?? null}::int, cancelled),
      last_error = case when ${u.lastError !== undefined}::boolean then ${u.lastError ?? null}::text else last_error end,
      ended_at = case when ${ended}::boolean then coalesce(ended_at, now()) else ended_at end,
      next_poll_at = case when ${release}::boolean then now() + make_interval(secs => ${u.nextPollSeconds ?? 0}::float8) else next_poll_at end,
      lease_owner = case when ${release}::boolean then null else lease_owner end,
      lease_expires_at = case when ${release}::boolean then null else now() + make_interval(secs => ${args.leaseSeconds}::float8) end
    where id = ${args.id}::uuid and lease_owner = ${args.owner}::text and lease_expires_at > now()
    returning id`;
  return rows.length > 0;
}

/** Items of a provider batch still at the provider (running, no hold). */
export async function itemsAtProvider(db: DbOrTx, providerBatchId: string): Promise<string[]> {
  const rows = await driverOf(db)<{ id: string }[]>`
    select id from subagent_batch_items where provider_batch_id = ${providerBatchId}::uuid and status = 'running' and lease_owner is null`;
  return rows.map((r) => r.id);
}

/** The batch's status and stored spec (the lane reads them per provider batch, not per item), and how long ago it was cancelled. */
export async function batchOf(db: DbOrTx, batchId: string): Promise<{ status: string; spec: unknown; cancelledSeconds: number | null } | null> {
  const [row] = await driverOf(db)<{ status: string; execution_spec: unknown; cancelled_seconds: number | null }[]>`
    select status, execution_spec,
           case when status = 'cancelled' then extract(epoch from now() - coalesce(finished_at, updated_at))::float8 end as cancelled_seconds
      from subagent_batches where id = ${batchId}::uuid`;
  return row ? { status: row.status, spec: row.execution_spec, cancelledSeconds: row.cancelled_seconds } : null;
}

/** Seconds since a provider batch was taken (its deadline counts from then), by the database's clock. */
export async function providerBatchAgeSeconds(db: DbOrTx, id: string): Promise<number> {
  const [row] = await driverOf(db)<{ age: number }[]>`
    select extract(epoch from now() - created_at)::float8 as age from provider_batches where id = ${id}::uuid`;
  return row?.age ?? 0;
}

/**
 * Takes items still at the provider under an item lease for `owner` (who must hold the provider
 * batch): to settle them (`live` false), or to run them on the live lane (`live` true: leased and
 * unlinked, as a claim would leave them).
 */
export async function holdItems(
  db: DbOrTx,
  args: { owner: string; providerBatchId: string; ids: readonly string[]; leaseSeconds: number; live: boolean },
): Promise<ClaimedItem[]> {
  if (args.ids.length === 0) return [];
  const rows = await driverOf(db)<{
    item_id: string; batch_id: string; item_key: string; item_position: number; prompt: string; lease_token: string | number;
    attempt: number; expected: unknown; feedback: string | null; generation: number;
  }[]>`
    select * from flotilla_provider_hold(${args.owner}::text, ${args.providerBatchId}::uuid, ${`{${args.ids.join(",")}}`}::uuid[],
      ${args.leaseSeconds}::float8, ${args.live}::boolean)`;
  // A held item starts over at the provider: it resumes no durable steps.
  return rows.map((r) => toClaimed({ ...r, resume: false }));
}

/** The rest of a cancelled batch's provider batch: cancelled. */
export async function cancelRest(db: DbOrTx, args: { owner: string; providerBatchId: string }): Promise<number> {
  const [row] = await driverOf(db)<{ n: number }[]>`
    select flotilla_provider_cancel_rest(${args.owner}::text, ${args.providerBatchId}::uuid) as n`;
  return row?.n ?? 0;
}

/** Items of a provider batch still being submitted back to the queue (attempt refunded), not before `delaySeconds`. */
export async function releaseItems(
  db: DbOrTx,
  args: { owner: string; providerBatchId: string; ids: readonly string[]; error: string | null; delaySeconds: number },
): Promise<number> {
  if (args.ids.length === 0) return 0;
  const [row] = await driverOf(db)<{ n: number }[]>`
    select flotilla_provider_release(${args.owner}::text, ${args.providerBatchId}::uuid, ${`{${args.ids.join(",")}}`}::uuid[],
      ${args.error}::text, ${args.delaySeconds}::float8) as n`;
  return row?.n ?? 0;
}
