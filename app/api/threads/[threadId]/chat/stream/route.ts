import { requireUser } from "@/server/auth/authenticate";
import { activeStreamOf } from "@/server/chat/streams";
import { getThreadForUser } from "@/server/chat/threads";
import { getDatabase } from "@/server/db/client";
import { chatStreamResponse } from "@/server/http/chat-stream";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";
export const maxDuration = 3600;

type Ctx = { params: Promise<{ threadId: string }> };

/** Reattaches to the thread's running lead response from its first chunk (useChat resume); 204 when nothing runs. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { userId } = await requireUser(req);
  const { threadId } = await ctx.params;
  const { db } = getDatabase();
  const thread = await getThreadForUser(db, { userId, threadId });
  const active = await activeStreamOf(db, { threadId: thread.id });
  if (!active) return new Response(null, { status: 204 });
  return chatStreamResponse(db, active.id);
});
