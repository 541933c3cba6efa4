import { cancelCompatBatch } from "@/server/compat/batches";
import { toAnthropicBatch } from "@/server/compat/projection";
import { compatBatchRoute, requestOrigin } from "@/server/http/compat";

export const dynamic = "force-dynamic";

/** Anthropic messages.batches.cancel: answers `canceling`; the batch reads `ended` once its requests are stopped. */
export const POST = compatBatchRoute("anthropic", async ({ req, userId, id, db }) => {
  const cancelled = await cancelCompatBatch(db, { userId, api: "anthropic", id });
  return Response.json(toAnthropicBatch(cancelled, requestOrigin(req), { canceling: cancelled.compat.expiredAt === null }));
});
