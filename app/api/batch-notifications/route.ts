import { requireUser } from "@/server/auth/authenticate";
import { listUnseenSettlements } from "@/server/batches/unseen";
import { getDatabase } from "@/server/db/client";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** Batches of this user that settled since their thread was last opened (the sidebar badges). */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const rows = await listUnseenSettlements(getDatabase().db, userId);
  return json({
    unseen: rows.map((r) => ({
      thread_id: r.threadId,
      batch_id: r.batchId,
      status: r.status,
      finished_at: r.finishedAt ? r.finishedAt.toISOString() : null,
    })),
  });
});
