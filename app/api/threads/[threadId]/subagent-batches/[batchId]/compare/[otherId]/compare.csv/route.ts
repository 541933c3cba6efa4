import { comparedBatches } from "@/server/batches/compare";
import { comparePageScope } from "@/server/http/batch-scope";
import { compareCsvStream } from "@/server/http/compare-csv";
import { downloadResponse } from "@/server/http/download";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; otherId: string }> };

/** The comparison's pairs as CSV (`?change=`), one line each, formula cells guarded. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, args, query, previewMaxChars } = await comparePageScope(req, await ctx.params);
  await comparedBatches(db, args); // 404 before the stream starts
  const { change } = query;
  const body = compareCsvStream(db, { ...args, change, previewMaxChars });
  const name = `compare-${args.batchId}-${args.otherId}${change && change !== "all" ? `.${change}` : ""}.csv`;
  return downloadResponse(body, "text/csv; charset=utf-8; header=present", name);
});
