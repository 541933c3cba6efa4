import { batchScope } from "@/server/http/batch-scope";
import { exportPool, exportResultsStream } from "@/server/http/export";
import { getBatch } from "@/server/batches/repository";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** Every item with its full stored result, one JSON line each in position order, streamed from a snapshot. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  await getBatch(db, { userId, threadId, batchId });
  return new Response(exportResultsStream(exportPool(), { batchId, signal: req.signal }), {
    status: 200,
    headers: {
      "content-type": "application/x-ndjson; charset=utf-8",
      "content-disposition": `attachment; filename="batch-${batchId}-results.jsonl"`,
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    },
  });
});
