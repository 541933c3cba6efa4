import { comparedBatches } from "@/server/batches/compare";
import { comparePageScope } from "@/server/http/batch-scope";
import { compareCsvStream } from "@/server/http/compare-csv";
import { connectionKey } from "@/server/http/connections";
import { downloadResponse } from "@/server/http/download";
import { exportPool } from "@/server/http/export";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; otherId: string }> };

/**
 * The comparison's pairs as CSV (`?change=`), one line each, formula cells guarded; an export
 * like results.csv (a snapshot, `exports.max_seconds`, 429 too_many_exports while two exports
 * of this user are in progress).
 */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, args, query, previewMaxChars } = await comparePageScope(req, await ctx.params);
  await comparedBatches(db, args); // 404 before the stream starts
  const { change } = query;
  const maxMs = config.exports.max_seconds * 1000;
  const body = await compareCsvStream(exportPool(), {
    batchId: args.batchId,
    otherId: args.otherId,
    userId: args.userId,
    change,
    previewMaxChars,
    maxMs,
    signal: req.signal,
    connection: connectionKey(req),
  });
  const name = `compare-${args.batchId}-${args.otherId}${change && change !== "all" ? `.${change}` : ""}.csv`;
  return downloadResponse(body, "text/csv; charset=utf-8; header=present", name);
});
