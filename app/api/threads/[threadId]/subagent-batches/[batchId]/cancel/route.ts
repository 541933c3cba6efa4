import { batchProjectionSchema } from "@/lib/api/batches";
import { batchScope, project, requireLiveWorker } from "@/server/batches/http-scope";
import { projectBatch } from "@/server/batches/projection";
import { getBatch, cancelBatch } from "@/server/batches/repository";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** 404 before 503: an unknown batch is unknown whether or not a worker runs. 409 when the state forbids it. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  await getBatch(db, { userId, threadId, batchId });
  await requireLiveWorker(db, config);
  const batch = await cancelBatch(db, { userId, threadId, batchId });
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds: config.subagent_batches.lease_seconds })));
});
