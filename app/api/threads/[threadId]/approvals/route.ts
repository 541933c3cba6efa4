import { listThreadApprovals } from "@/server/agent/chat-approvals";
import { requireUser } from "@/server/auth/authenticate";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The calls waiting for a person in this thread (the lead's and its task / swarm children's), oldest first. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId });
  return json({ approvals: await listThreadApprovals(db, { userId, threadId: thread.id }) });
});
