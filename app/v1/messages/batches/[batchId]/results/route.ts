import { getCompatBatch } from "@/server/compat/batches";
import { toWebStream } from "@/server/compat/files";
import { anthropicBatchId } from "@/server/compat/ids";
import { resultFileChunks } from "@/server/compat/output";
import { AppError } from "@/server/errors";
import { compatBatchRoute, jsonlResponse } from "@/server/http/compat";

export const dynamic = "force-dynamic";

/** Anthropic results (the batch's results_url): one JSON line per request, streamed; only once it has ended. */
export const GET = compatBatchRoute("anthropic", async ({ userId, id, db }) => {
  const current = await getCompatBatch(db, { userId, api: "anthropic", id });
  if (current.batch && ["queued", "running", "paused"].includes(current.batch.status))
    throw new AppError("conflict", "batch is still in progress; results are available once it has ended");
  return jsonlResponse(toWebStream(resultFileChunks(db, current, "results")), `${anthropicBatchId(id)}_results.jsonl`);
});
