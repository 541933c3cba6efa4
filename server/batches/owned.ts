import { and, eq, type SQL } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatches } from "@/server/db/schema";
import { notFound } from "@/server/errors";
import type { BatchRow } from "./types";

/**
 * Owner-scoped lookups every batch module starts from: a batch of someone else, or of another
 * thread, is "not found" (never "forbidden"), and a malformed id cannot name anything.
 */

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface BatchScopeArgs {
  userId: string;
  threadId: string;
  batchId: string;
}

/** The batches of this owner's thread, the condition every batch query of a thread starts from. */
export function threadBatches(scope: { userId: string; threadId: string }): SQL {
  return and(eq(subagentBatches.userId, scope.userId), eq(subagentBatches.threadId, scope.threadId)) as SQL;
}

/** This one batch of this owner's thread: another user's batch, or another thread's, matches nothing. */
export function ownedBatch(scope: BatchScopeArgs): SQL {
  return and(eq(subagentBatches.id, scope.batchId), threadBatches(scope)) as SQL;
}

export function checkIds(args: { threadId: string; batchId?: string; itemId?: string }): void {
  if (!UUID.test(args.threadId)) throw notFound("thread");
  if (args.batchId !== undefined && !UUID.test(args.batchId)) throw notFound("batch");
  if (args.itemId !== undefined && !UUID.test(args.itemId)) throw notFound("item");
}

export async function getBatch(db: DbOrTx, args: BatchScopeArgs, lock?: "update"): Promise<BatchRow> {
  checkIds(args);
  const query = db.select().from(subagentBatches).where(ownedBatch(args));
  const [row] = lock ? await query.for(lock) : await query;
  if (!row) throw notFound("batch");
  return row;
}

/** The batch row locked for a control (FOR UPDATE), owner-scoped like getBatch. */
export function lockBatch(tx: DbOrTx, args: BatchScopeArgs): Promise<BatchRow> {
  return getBatch(tx, args, "update");
}


/**
 * This owner's batch by its id alone, whatever its thread (for a face that names batches without
 * their thread, such as /mcp); its thread then scopes every further call as usual.
 */
export async function getOwnedBatch(db: DbOrTx, args: { userId: string; batchId: string }): Promise<BatchRow> {
  if (!UUID.test(args.batchId)) throw notFound("batch");
  const [row] = await db
    .select()
    .from(subagentBatches)
    .where(and(eq(subagentBatches.id, args.batchId), eq(subagentBatches.userId, args.userId)));
  if (!row) throw notFound("batch");
  return row;
}

/** The thread of this owner's batch made with this submission_key, or null when none was. */
export async function threadOfSubmission(db: DbOrTx, args: { userId: string; submissionKey: string }): Promise<string | null> {
  const [row] = await db
    .select({ threadId: subagentBatches.threadId })
    .from(subagentBatches)
    .where(and(eq(subagentBatches.userId, args.userId), eq(subagentBatches.submissionKey, args.submissionKey)));
  return row?.threadId ?? null;
}
