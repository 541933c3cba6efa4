import { listThreadApprovals } from "@/server/agent/chat-approvals";
import { threadScope } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The calls waiting for a person in this thread (the lead's and its task / swarm children's), oldest first. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId } = await threadScope(req, await ctx.params);
  return json({ approvals: await listThreadApprovals(db, { userId, threadId }) });
});
