import { cancelCompatBatch } from "@/server/compat/batches";
import { compatHandle, requestOrigin, requireApiKey } from "@/server/http/compat";
import { parseAnthropicBatchId } from "@/server/compat/ids";
import { toAnthropicBatch } from "@/server/compat/projection";
import { getDatabase } from "@/server/db/client";
import { notFound } from "@/server/errors";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ batchId: string }> };

/** Anthropic messages.batches.cancel: answers `canceling`; the batch reads `ended` once its requests are stopped. */
export const POST = compatHandle("anthropic", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const id = parseAnthropicBatchId((await ctx.params).batchId);
  if (!id) throw notFound("batch");
  const cancelled = await cancelCompatBatch(getDatabase().db, { userId, api: "anthropic", id });
  return Response.json(toAnthropicBatch(cancelled, requestOrigin(req), { canceling: cancelled.compat.expiredAt === null }));
});
