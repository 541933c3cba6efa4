import { getBatch } from "@/server/batches/repository";
import { batchScope } from "@/server/http/batch-scope";
import { connectionKey } from "@/server/http/connections";
import { downloadResponse } from "@/server/http/download";
import { exportFileName, exportPool, exportResultsStream, parseExportQuery } from "@/server/http/export";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/**
 * Every item (or those of `?status=&verdict=`) with its full stored result and `expected`, one
 * JSON line each in position order, streamed from a snapshot; 429 too_many_exports while two
 * exports of this user are in progress.
 */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const { filter } = parseExportQuery(new URL(req.url).searchParams, { raw: false });
  await getBatch(db, { userId, threadId, batchId });
  const maxMs = config.exports.max_seconds * 1000;
  const body = await exportResultsStream(exportPool(), { batchId, userId, filter, maxMs, signal: req.signal, connection: connectionKey(req) });
  return downloadResponse(body, "application/x-ndjson; charset=utf-8", exportFileName(batchId, "jsonl", { filter }));
});
