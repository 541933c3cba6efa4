import { batchProjectionSchema, itemProjectionSchema } from "@/lib/api/batches";
import { assertItemInBatch, batchScope, parseItemId, project, requireLiveWorker } from "@/server/batches/http-scope";
import { projectBatch, toItemProjection } from "@/server/batches/projection";
import { retryItem } from "@/server/batches/repository";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; itemId: string }> };

/**
 * Re-queues a failed item with fresh attempts (reopening a finished batch); 409 for any other
 * item state. Answers `{ item, batch }` so a client can update both without another read.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const scope = await batchScope(req, params);
  const itemId = parseItemId(params.itemId);
  await assertItemInBatch(scope.db, { ...scope, itemId });
  await requireLiveWorker(scope.db, scope.config);
  const previewMaxChars = scope.config.subagent_batches.result_preview_max_chars;
  const { item, batch } = await retryItem(scope.db, { ...scope, itemId, previewMaxChars });
  return json({
    item: project(itemProjectionSchema, toItemProjection(item)),
    batch: project(batchProjectionSchema, await projectBatch(scope.db, { batch, leaseSeconds: scope.config.subagent_batches.lease_seconds })),
  });
});
