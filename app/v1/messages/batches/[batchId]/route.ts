import { deleteCompatBatch, getCompatBatch } from "@/server/compat/batches";
import { anthropicBatchId } from "@/server/compat/ids";
import { toAnthropicBatch } from "@/server/compat/projection";
import { compatBatchRoute, requestOrigin } from "@/server/http/compat";

export const dynamic = "force-dynamic";

/** Anthropic messages.batches.retrieve. */
export const GET = compatBatchRoute("anthropic", async ({ req, userId, id, db }) =>
  Response.json(toAnthropicBatch(await getCompatBatch(db, { userId, api: "anthropic", id }), requestOrigin(req))),
);

/** Anthropic messages.batches.delete: an ended batch only (409 while it runs). */
export const DELETE = compatBatchRoute("anthropic", async ({ userId, id, db }) => {
  await deleteCompatBatch(db, { userId, api: "anthropic", id });
  return Response.json({ id: anthropicBatchId(id), type: "message_batch_deleted" });
});
