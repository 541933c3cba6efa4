import { itemApprovalSchema } from "@/lib/api/approvals";
import { batchProjectionSchema, itemProjectionSchema } from "@/lib/api/batches";
import { decideItemApproval } from "@/server/batches/approvals";
import { projectBatch, toItemProjection } from "@/server/batches/projection";
import { assertItemInBatch, batchScope, parseItemId, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; itemId: string }> };

/**
 * The owner's decision on the calls a waiting item asks to make: approve re-queues it to run
 * them, deny re-queues it with the model told why. 409 when the item is not waiting. Answers
 * `{ item, batch }` like the item retry.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const scope = await batchScope(req, params);
  const itemId = parseItemId(params.itemId);
  await assertItemInBatch(scope.db, { ...scope, itemId });
  const { decision, reason } = await readJson(req, itemApprovalSchema, 16 * 1024);
  const previewMaxChars = scope.config.subagent_batches.result_preview_max_chars;
  const { item, batch } = await decideItemApproval(scope.db, { ...scope, itemId, decision, reason, previewMaxChars });
  return json({
    item: project(itemProjectionSchema, toItemProjection(item, previewMaxChars)),
    batch: project(batchProjectionSchema, await projectBatch(scope.db, { batch, leaseSeconds: scope.config.subagent_batches.lease_seconds })),
  });
});
