import { and, eq } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatches } from "@/server/db/schema";
import { notFound } from "@/server/errors";
import type { BatchRow } from "./types";

/**
 * Owner-scoped lookups every batch module starts from: a batch of someone else, or of another
 * thread, is "not found" (never "forbidden"), and a malformed id cannot name anything.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface BatchScopeArgs {
  userId: string;
  threadId: string;
  batchId: string;
}

export function checkIds(args: { threadId: string; batchId?: string; itemId?: string }): void {
  if (!UUID.test(args.threadId)) throw notFound("thread");
  if (args.batchId !== undefined && !UUID.test(args.batchId)) throw notFound("batch");
  if (args.itemId !== undefined && !UUID.test(args.itemId)) throw notFound("item");
}

export async function getBatch(db: DbOrTx, args: BatchScopeArgs, lock?: "update"): Promise<BatchRow> {
  checkIds(args);
  const b = subagentBatches;
  const query = db
    .select()
    .from(b)
    .where(and(eq(b.id, args.batchId), eq(b.userId, args.userId), eq(b.threadId, args.threadId)));
  const [row] = lock ? await query.for(lock) : await query;
  if (!row) throw notFound("batch");
  return row;
}

/** The batch row locked for a control (FOR UPDATE), owner-scoped like getBatch. */
export function lockBatch(tx: DbOrTx, args: BatchScopeArgs): Promise<BatchRow> {
  return getBatch(tx, args, "update");
}

