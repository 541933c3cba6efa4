import { batchProjectionSchema } from "@/lib/api/batches";
import { batchScope, project } from "@/server/http/batch-scope";
import { projectBatch } from "@/server/batches/projection";
import { getBatch } from "@/server/batches/repository";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const batch = await getBatch(db, { userId, threadId, batchId });
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds: config.subagent_batches.lease_seconds })));
});
