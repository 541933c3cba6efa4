import { comparedBatches } from "@/server/batches/compare";
import { batchScope, parseCompareQuery, parseOtherBatchId } from "@/server/http/batch-scope";
import { compareCsvStream } from "@/server/http/compare-csv";
import { downloadResponse } from "@/server/http/download";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; otherId: string }> };

/** The comparison's pairs as CSV (`?change=`), one line each, formula cells guarded. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const { db, config, userId, threadId, batchId } = await batchScope(req, params);
  const otherId = parseOtherBatchId(params.otherId);
  const { change } = parseCompareQuery(new URL(req.url).searchParams);
  const scope = { userId, threadId, batchId, otherId };
  await comparedBatches(db, scope); // 404 before the stream starts
  const previewMaxChars = config.subagent_batches.result_preview_max_chars;
  const body = compareCsvStream(db, { ...scope, change, previewMaxChars });
  return downloadResponse(body, "text/csv; charset=utf-8; header=present", `compare-${batchId}-${otherId}${change && change !== "all" ? `.${change}` : ""}.csv`);
});
