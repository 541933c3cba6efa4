import { getCompatBatch } from "@/server/compat/batches";
import { toOpenAiBatch } from "@/server/compat/projection";
import { compatBatchRoute } from "@/server/http/compat";

export const dynamic = "force-dynamic";

/** OpenAI batches.retrieve. */
export const GET = compatBatchRoute("openai", async ({ userId, id, db }) =>
  Response.json(toOpenAiBatch(await getCompatBatch(db, { userId, api: "openai", id }))),
);
