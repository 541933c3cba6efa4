import { specColumns } from "@/server/batches/spec";
import { getBatch } from "@/server/batches/repository";
import { batchScope } from "@/server/http/batch-scope";
import { contentDisposition } from "@/server/http/download";
import { exportCsvStream, exportPool } from "@/server/http/export";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** The results table: RFC 4180 CSV with a header row, one row per item in position order, streamed from a snapshot. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const batch = await getBatch(db, { userId, threadId, batchId });
  const plan = specColumns(batch);
  return new Response(exportCsvStream(exportPool(), { batchId, plan, signal: req.signal }), {
    status: 200,
    headers: {
      "content-type": "text/csv; charset=utf-8; header=present",
      "content-disposition": contentDisposition("results.csv"),
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    },
  });
});
