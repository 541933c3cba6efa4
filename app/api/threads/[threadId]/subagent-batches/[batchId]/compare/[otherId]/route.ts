import { compareSummarySchema } from "@/lib/api/compare";
import { compareSummary } from "@/server/batches/compare";
import { batchScope, parseOtherBatchId, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; otherId: string }> };

/** The comparison of batch a (this thread's) with b (any batch of the caller's): verdicts, p-value, checks, cost and time. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const { db, userId, threadId, batchId } = await batchScope(req, params);
  const otherId = parseOtherBatchId(params.otherId);
  return json(project(compareSummarySchema, await compareSummary(db, { userId, threadId, batchId, otherId })));
});
