import { toRunProjection, listRunsForThread } from "@/server/agent/runs";
import { requireUser } from "@/server/auth/authenticate";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The thread's agent runs (lead and sub-agents), oldest first; cards use it after a reload or restart. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId });
  const rows = await listRunsForThread(db, { userId, threadId: thread.id });
  return json({ runs: rows.map((r) => toRunProjection(r)) });
});
