import { getCompatBatch } from "@/server/compat/batches";
import { compatHandle, requireApiKey } from "@/server/http/compat";
import { parseOpenAiBatchId } from "@/server/compat/ids";
import { toOpenAiBatch } from "@/server/compat/projection";
import { getDatabase } from "@/server/db/client";
import { notFound } from "@/server/errors";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ batchId: string }> };

/** OpenAI batches.retrieve. */
export const GET = compatHandle("openai", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const id = parseOpenAiBatchId((await ctx.params).batchId);
  if (!id) throw notFound("batch");
  return Response.json(toOpenAiBatch(await getCompatBatch(getDatabase().db, { userId, api: "openai", id })));
});
