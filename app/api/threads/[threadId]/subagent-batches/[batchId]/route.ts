import { batchProjectionSchema } from "@/lib/api/batches";
import { batchScope, project } from "@/server/batches/http-scope";
import { toBatchProjection } from "@/server/batches/projection";
import { getBatch } from "@/server/batches/repository";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const batch = await getBatch(db, { userId, threadId, batchId });
  return json(project(batchProjectionSchema, toBatchProjection(batch)));
});
