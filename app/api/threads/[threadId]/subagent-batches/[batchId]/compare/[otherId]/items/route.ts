import { comparePageSchema } from "@/lib/api/compare";
import { comparePairs } from "@/server/batches/compare";
import { batchScope, parseCompareQuery, parseOtherBatchId, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; otherId: string }> };

/** One keyset page of matched item pairs (`change`, `cursor`, `limit` ≤ 200), in a's position order. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const { db, config, userId, threadId, batchId } = await batchScope(req, params);
  const otherId = parseOtherBatchId(params.otherId);
  const query = parseCompareQuery(new URL(req.url).searchParams);
  const previewMaxChars = config.subagent_batches.result_preview_max_chars;
  const { items, next_cursor } = await comparePairs(db, { userId, threadId, batchId, otherId, ...query, previewMaxChars });
  return json(project(comparePageSchema, { items, next_cursor }));
});
