import { batchProjectionSchema, budgetUpdateSchema } from "@/lib/api/batches";
import { updateBudget } from "@/server/batches/budget";
import { batchScope, project } from "@/server/http/batch-scope";
import { projectBatch } from "@/server/batches/projection";
import { getBatch } from "@/server/batches/repository";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** Raise (or remove with null) the batch's token / cost budget. 400 below what already ran; resume separately. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  await getBatch(db, { userId, threadId, batchId });
  const update = await readJson(req, budgetUpdateSchema, 16 * 1024);
  const batch = await updateBudget(db, { userId, threadId, batchId, update });
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds: config.subagent_batches.lease_seconds })));
});
