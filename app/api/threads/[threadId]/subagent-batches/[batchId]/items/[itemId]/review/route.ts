import { itemReviewSchema, reviewRequestSchema } from "@/lib/api/reviews";
import { decideReview, requestReview } from "@/server/batches/reviews";
import { batchScope, parseItemId, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; itemId: string }> };

const MAX_BODY_BYTES = 1024 * 1024;

/**
 * `{ request: true }` puts the item in its owner's review queue; `{ decision, note?, output?,
 * version }` decides it at that version (409 when it moved on: nothing decided). Answers the review.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const scope = await batchScope(req, params);
  const itemId = parseItemId(params.itemId);
  const body = await readJson(req, reviewRequestSchema, Math.min(MAX_BODY_BYTES, scope.config.http.max_body_bytes));
  const args = { userId: scope.userId, threadId: scope.threadId, batchId: scope.batchId, itemId };
  const review = "request" in body ? await requestReview(scope.db, args) : await decideReview(scope.db, { ...args, ...body });
  return json(project(itemReviewSchema, review));
});
