import { batchProjectionSchema, itemProjectionSchema, itemRetrySchema } from "@/lib/api/batches";
import { ITEM_PROMPT_MAX_CHARS } from "@/lib/batch-rules";
import { projectBatch, toItemProjection } from "@/server/batches/projection";
import { retryItem } from "@/server/batches/repository";
import { assertItemInBatch, batchScope, parseItemId, project, requireLiveWorker } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; itemId: string }> };

/** A corrected input is at most one item's prompt, up to 4 bytes a character, plus its envelope. */
const BODY_MAX_BYTES = ITEM_PROMPT_MAX_CHARS * 4 + 64 * 1024;

/**
 * Re-queues a finished item with fresh attempts (reopening a finished batch), optionally with a
 * corrected `input` (checked like a submission item; its prompt rebuilt from the batch's
 * template). Without one the item must have failed or carry a failed verdict; 409 otherwise.
 * Answers `{ item, batch }` so a client can update both without another read.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const scope = await batchScope(req, params);
  const itemId = parseItemId(params.itemId);
  await assertItemInBatch(scope.db, { ...scope, itemId });
  const { input } = await readJson(req, itemRetrySchema, BODY_MAX_BYTES);
  await requireLiveWorker(scope.db, scope.config);
  const previewMaxChars = scope.config.subagent_batches.result_preview_max_chars;
  const { item, batch } = await retryItem(scope.db, { ...scope, itemId, input, config: scope.config, previewMaxChars });
  return json({
    item: project(itemProjectionSchema, toItemProjection(item, previewMaxChars)),
    batch: project(batchProjectionSchema, await projectBatch(scope.db, { batch, leaseSeconds: scope.config.subagent_batches.lease_seconds })),
  });
});
