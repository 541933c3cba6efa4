import { and, desc, eq, sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatches } from "@/server/db/schema";
import { threadBatches } from "./owned";

/**
 * "Settled since you last looked": the loop trigger sets unseen_settlement on every settlement;
 * opening the thread clears it. Reads walk the partial index subagent_batches_unseen_idx.
 */

export const UNSEEN_LIMIT = 100;

export async function listUnseenSettlements(
  db: DbOrTx,
  userId: string,
): Promise<{ threadId: string; batchId: string; status: string; finishedAt: Date | null }[]> {
  return db
    .select({
      threadId: subagentBatches.threadId,
      batchId: subagentBatches.id,
      status: subagentBatches.status,
      finishedAt: subagentBatches.finishedAt,
    })
    .from(subagentBatches)
    .where(and(eq(subagentBatches.userId, userId), sql`${subagentBatches.unseenSettlement}`))
    .orderBy(desc(subagentBatches.finishedAt))
    .limit(UNSEEN_LIMIT);
}

/** Clears the thread's badges; returns how many batches were marked seen. */
export async function markSettlementsSeen(db: DbOrTx, args: { userId: string; threadId: string }): Promise<number> {
  const rows = await db
    .update(subagentBatches)
    .set({ unseenSettlement: false })
    .where(and(threadBatches(args), sql`${subagentBatches.unseenSettlement}`))
    .returning({ id: subagentBatches.id });
  return rows.length;
}
