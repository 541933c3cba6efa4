import { requireUser } from "@/server/auth/authenticate";
import { listPendingWakeupThreads, listUnseenSettlements } from "@/server/batches/unseen";
import { getDatabase } from "@/server/db/client";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

/**
 * Batches of this user that settled since their thread was last opened (the sidebar badges),
 * and the threads whose lead wake-up is still pending (their open chat polls for the reply).
 */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const { db } = getDatabase();
  const [rows, pending] = await Promise.all([listUnseenSettlements(db, userId), listPendingWakeupThreads(db, userId)]);
  return json({
    pending_wakeups: pending,
    unseen: rows.map((r) => ({
      thread_id: r.threadId,
      batch_id: r.batchId,
      status: r.status,
      finished_at: r.finishedAt ? r.finishedAt.toISOString() : null,
    })),
  });
});
