import { requireUser } from "@/server/auth/authenticate";
import { listUnseenSettlements } from "@/server/batches/unseen";
import { pendingWakeupThreads, recentWakeupReplies } from "@/server/chat/wakeup-watch";
import { getDatabase } from "@/server/db/client";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

/**
 * Batches of this user that settled since their thread was last opened (the sidebar badges),
 * the threads whose lead wake-up (a settled batch's, or settled background children's) is
 * pending, and the wake-up replies of the last minute: an open chat polls its messages until it
 * shows them.
 */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const { db } = getDatabase();
  const [rows, pending, recent] = await Promise.all([
    listUnseenSettlements(db, userId),
    pendingWakeupThreads(db, userId),
    recentWakeupReplies(db, userId),
  ]);
  return json({
    pending_wakeups: pending,
    recent_replies: recent.map((r) => ({ thread_id: r.threadId, message_id: r.messageId })),
    unseen: rows.map((r) => ({
      thread_id: r.threadId,
      batch_id: r.batchId,
      status: r.status,
      finished_at: r.finishedAt ? r.finishedAt.toISOString() : null,
    })),
  });
});
