import { specColumns } from "@/server/batches/spec";
import { getBatch } from "@/server/batches/repository";
import { batchScope } from "@/server/http/batch-scope";
import { connectionKey } from "@/server/http/connections";
import { downloadResponse } from "@/server/http/download";
import { exportCsvStream, exportFileName, exportPool, parseExportQuery } from "@/server/http/export";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/**
 * The results table: RFC 4180 CSV with a header row, one row per item (or those of
 * `?status=&verdict=`) in position order, streamed from a snapshot; cells that would start a
 * spreadsheet formula get a leading `'` unless `?raw=1`; a filtered or raw file is named so (exportFileName). 429 too_many_exports while two exports
 * of this user are in progress.
 */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const { filter, raw } = parseExportQuery(new URL(req.url).searchParams, { raw: true });
  const batch = await getBatch(db, { userId, threadId, batchId });
  const plan = specColumns(batch);
  const maxMs = config.exports.max_seconds * 1000;
  const body = await exportCsvStream(exportPool(), { batchId, userId, plan, filter, raw, maxMs, signal: req.signal, connection: connectionKey(req) });
  return downloadResponse(body, "text/csv; charset=utf-8; header=present", exportFileName(batchId, "csv", { filter, raw }));
});
