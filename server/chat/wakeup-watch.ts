import { and, eq, gt, isNotNull, isNull, sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { batchWakeups, childWakeups } from "@/server/db/schema";

/**
 * What an open chat watches for, so the lead's replies nobody asked for in that tab appear
 * without a reload, both kinds alike: a settled batch's wake-up (wakeup.ts) and settled
 * background children's (children-wakeup.ts). Read by the shared notifications poll
 * (`GET /api/batch-notifications`); the chat polls its thread's messages while a wake-up of the
 * thread is pending, or while one of the last minute's replies is missing from the tab (a quick
 * wake-up can start and end between two notification polls).
 */

/** At most this many threads or replies are listed. */
export const WATCH_LIMIT = 100;
/** A reply stored this recently is listed. */
export const RECENT_REPLY_SECONDS = 60;

/**
 * Threads of this user whose lead wake-up is due or running: a settled batch's not done yet, or
 * settled background children's not done yet (children still running cost no polls).
 */
export async function pendingWakeupThreads(db: DbOrTx, userId: string): Promise<string[]> {
  const rows = await db
    .selectDistinct({ threadId: batchWakeups.threadId })
    .from(batchWakeups)
    .where(and(eq(batchWakeups.userId, userId), isNull(batchWakeups.doneAt)))
    .union(
      db
        .selectDistinct({ threadId: childWakeups.threadId })
        .from(childWakeups)
        .where(and(eq(childWakeups.userId, userId), isNull(childWakeups.doneAt), isNotNull(childWakeups.settledAt))),
    )
    .limit(WATCH_LIMIT);
  return rows.map((r) => r.threadId);
}

/** The wake-up replies of this user's threads stored in the last minute (newest first). */
export async function recentWakeupReplies(db: DbOrTx, userId: string): Promise<{ threadId: string; messageId: string }[]> {
  const since = sql`now() - make_interval(secs => ${RECENT_REPLY_SECONDS})`;
  const rows = await db
    .select({ threadId: batchWakeups.threadId, messageId: sql<string>`${batchWakeups.messageId}`, doneAt: batchWakeups.doneAt })
    .from(batchWakeups)
    .where(and(eq(batchWakeups.userId, userId), gt(batchWakeups.doneAt, since), isNotNull(batchWakeups.messageId)))
    .unionAll(
      db
        .select({ threadId: childWakeups.threadId, messageId: sql<string>`${childWakeups.messageId}`, doneAt: childWakeups.doneAt })
        .from(childWakeups)
        .where(and(eq(childWakeups.userId, userId), gt(childWakeups.doneAt, since), isNotNull(childWakeups.messageId))),
    )
    .orderBy(sql`3 desc`)
    .limit(WATCH_LIMIT);
  return rows.map((r) => ({ threadId: r.threadId, messageId: r.messageId }));
}
