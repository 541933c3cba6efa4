import { isBatchAction } from "@/lib/api/batch-controls";
import { batchProjectionSchema } from "@/lib/api/batches";
import { projectBatch } from "@/server/batches/projection";
import { batchControls, getBatch } from "@/server/batches/repository";
import { notFound } from "@/server/errors";
import { batchScope, project, requireLiveWorker } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; action: string }> };

/**
 * POST .../{batchId}/pause|resume|cancel: the controls of lib/api/batch-controls.ts.
 * 404 before 503: an unknown batch is unknown whether or not a worker runs. 409 when the state forbids it.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { action, ...params } = await ctx.params;
  if (!isBatchAction(action)) throw notFound("action");
  const { db, config, userId, threadId, batchId } = await batchScope(req, params);
  await getBatch(db, { userId, threadId, batchId });
  await requireLiveWorker(db, config);
  const batch = await batchControls[action](db, { userId, threadId, batchId });
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds: config.subagent_batches.lease_seconds })));
});
