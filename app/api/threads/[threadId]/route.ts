import { requireUser } from "@/server/auth/authenticate";
import { loadMessages } from "@/server/chat/messages";
import { getThreadForUser, toThreadProjection } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId });
  const messages = await loadMessages(db, { threadId: thread.id });
  return json({ ...toThreadProjection(thread), messages });
});
