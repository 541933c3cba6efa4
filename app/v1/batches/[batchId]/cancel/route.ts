import { cancelCompatBatch } from "@/server/compat/batches";
import { toOpenAiBatch } from "@/server/compat/projection";
import { compatBatchRoute } from "@/server/http/compat";

export const dynamic = "force-dynamic";

/** OpenAI batches.cancel: answers `cancelling`; the batch reads `cancelled` once its items are stopped. */
export const POST = compatBatchRoute("openai", async ({ userId, id, db }) => {
  const cancelled = await cancelCompatBatch(db, { userId, api: "openai", id });
  return Response.json(toOpenAiBatch(cancelled, { cancelling: cancelled.compat.expiredAt === null }));
});
