import { isBatchAction } from "@/lib/api/batch-controls";
import { batchProjectionSchema } from "@/lib/api/batches";
import { projectBatch } from "@/server/batches/projection";
import { notFound } from "@/server/errors";
import { applyBatchControl, batchScope, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; action: string }> };

/** POST .../{batchId}/pause|resume|cancel: the controls of lib/api/batch-controls.ts (404, then 503 without a worker, 409 when the state forbids it). */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { action, ...params } = await ctx.params;
  if (!isBatchAction(action)) throw notFound("action");
  const { db, config, userId, threadId, batchId } = await batchScope(req, params);
  const batch = await applyBatchControl(db, config, { userId, threadId, batchId }, action);
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds: config.subagent_batches.lease_seconds })));
});
