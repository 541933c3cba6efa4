import { randomUUID } from "node:crypto";
import { sql } from "drizzle-orm";
import { configSchema, type FlotillaConfig, type FlotillaConfigInput } from "@/lib/config";
import type { Db } from "@/server/db/client";
import { threads, users } from "@/server/db/schema";

/** Shared by the batch suites: configuration, owners, invariant checks. */

export function testConfig(input: FlotillaConfigInput = {}): FlotillaConfig {
  return configSchema.parse(input);
}

/** A user with a thread, inserted directly (password hashing is not what these suites test). */
export async function makeOwner(db: Db): Promise<{ userId: string; threadId: string }> {
  const [user] = await db
    .insert(users)
    .values({ email: `batch-${randomUUID()}@example.com`, passwordHash: "unused" })
    .returning();
  const [thread] = await db.insert(threads).values({ userId: user!.id, title: "batch suite" }).returning();
  return { userId: user!.id, threadId: thread!.id };
}

export const SIM_MODEL = { name: "simulator", simulator: true };

/** Counters on the batch row against a real count of its items (must always agree). */
export async function counterDrift(db: Db, batchId: string): Promise<Record<string, { counter: number; actual: number }>> {
  const [b] = await db.execute<Record<string, number>>(sql`
    select pending_count, queued_count, leased_count, running_count, awaiting_approval_count, succeeded_count, failed_count, cancelled_count,
           input_tokens::float8 as input_tokens, output_tokens::float8 as output_tokens,
           cached_input_tokens::float8 as cached_input_tokens, cache_write_tokens::float8 as cache_write_tokens
      from subagent_batches where id = ${batchId}`);
  const [a] = await db.execute<Record<string, number>>(sql`
    select count(*) filter (where status = 'pending')::int as pending_count,
           count(*) filter (where status = 'queued')::int as queued_count,
           count(*) filter (where status = 'leased')::int as leased_count,
           count(*) filter (where status = 'running')::int as running_count,
           count(*) filter (where status = 'awaiting_approval')::int as awaiting_approval_count,
           count(*) filter (where status = 'succeeded')::int as succeeded_count,
           count(*) filter (where status = 'failed')::int as failed_count,
           count(*) filter (where status = 'cancelled')::int as cancelled_count,
           coalesce(sum(input_tokens), 0)::float8 as input_tokens,
           coalesce(sum(output_tokens), 0)::float8 as output_tokens,
           coalesce(sum(cached_input_tokens), 0)::float8 as cached_input_tokens,
           coalesce(sum(cache_write_tokens), 0)::float8 as cache_write_tokens
      from subagent_batch_items where batch_id = ${batchId}`);
  const drift: Record<string, { counter: number; actual: number }> = {};
  for (const key of Object.keys(a!)) {
    if (Number(b![key]) !== Number(a![key])) drift[key] = { counter: Number(b![key]), actual: Number(a![key]) };
  }
  return drift;
}

export async function itemsOf(db: Db, batchId: string) {
  return db.execute<{
    id: string;
    item_key: string;
    position: number;
    status: string;
    attempts: number;
    lease_token: string;
    lease_owner: string | null;
    error: string | null;
    result: string | null;
    available_at: Date | null;
  }>(sql`select id, item_key, position, status, attempts, lease_token, lease_owner, error, result, available_at
           from subagent_batch_items where batch_id = ${batchId} order by position`);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
