import { threadScope } from "@/server/http/batch-scope";
import { markSettlementsSeen } from "@/server/batches/unseen";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The owner opened the thread: its settled batches stop badging it. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId } = await threadScope(req, await ctx.params);
  return json({ cleared: await markSettlementsSeen(db, { userId, threadId }) });
});
