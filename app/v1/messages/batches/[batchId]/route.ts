import { deleteCompatBatch, getCompatBatch } from "@/server/compat/batches";
import { compatHandle, requestOrigin, requireApiKey } from "@/server/http/compat";
import { anthropicBatchId, parseAnthropicBatchId } from "@/server/compat/ids";
import { toAnthropicBatch } from "@/server/compat/projection";
import { getDatabase } from "@/server/db/client";
import { notFound } from "@/server/errors";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ batchId: string }> };

async function batchIdOf(ctx: Ctx): Promise<string> {
  const id = parseAnthropicBatchId((await ctx.params).batchId);
  if (!id) throw notFound("batch");
  return id;
}

/** Anthropic messages.batches.retrieve. */
export const GET = compatHandle("anthropic", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const current = await getCompatBatch(getDatabase().db, { userId, api: "anthropic", id: await batchIdOf(ctx) });
  return Response.json(toAnthropicBatch(current, requestOrigin(req)));
});

/** Anthropic messages.batches.delete: an ended batch only (409 while it runs). */
export const DELETE = compatHandle("anthropic", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const id = await batchIdOf(ctx);
  await deleteCompatBatch(getDatabase().db, { userId, api: "anthropic", id });
  return Response.json({ id: anthropicBatchId(id), type: "message_batch_deleted" });
});
