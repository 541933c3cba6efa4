import { batchRetryResponseSchema, batchRetrySchema } from "@/lib/api/batches";
import { getBatch, retryBatch } from "@/server/batches/repository";
import { batchScope, project, requireLiveWorker } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/**
 * POST .../{batchId}/retry { status?, verdict?, check? }: every finished item matching all the
 * filters re-queued in one transaction; answers `{ retried: n }` (0 when nothing matched).
 * 404 first, then 400 for the body, 503 without a worker, 409 for a cancelled batch, 429 over a
 * quota (a retry passes a submission's).
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  await getBatch(db, { userId, threadId, batchId });
  const filter = await readJson(req, batchRetrySchema, 16 * 1024);
  await requireLiveWorker(db, config);
  const { retried } = await retryBatch(db, { userId, threadId, batchId, filter, config });
  return json(project(batchRetryResponseSchema, { retried }));
});
