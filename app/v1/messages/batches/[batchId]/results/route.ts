import { getCompatBatch } from "@/server/compat/batches";
import { toWebStream } from "@/server/compat/files";
import { compatHandle, jsonlResponse, requireApiKey } from "@/server/http/compat";
import { anthropicBatchId, parseAnthropicBatchId } from "@/server/compat/ids";
import { resultFileChunks } from "@/server/compat/output";
import { getDatabase } from "@/server/db/client";
import { AppError, notFound } from "@/server/errors";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ batchId: string }> };

/** Anthropic results (the batch's results_url): one JSON line per request, streamed; only once it has ended. */
export const GET = compatHandle("anthropic", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const id = parseAnthropicBatchId((await ctx.params).batchId);
  if (!id) throw notFound("batch");
  const db = getDatabase().db;
  const current = await getCompatBatch(db, { userId, api: "anthropic", id });
  if (current.batch && ["queued", "running", "paused"].includes(current.batch.status))
    throw new AppError("conflict", "batch is still in progress; results are available once it has ended");
  return jsonlResponse(toWebStream(resultFileChunks(db, current, "results")), `${anthropicBatchId(id)}_results.jsonl`);
});
