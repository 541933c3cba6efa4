import { CompatParamError } from "@/server/compat/errors";
import { openAiBatchCreateSchema } from "@/lib/api/compat";
import { listCompatBatches } from "@/server/compat/batches";
import { expireCompatBatches } from "@/server/compat/expiry";
import { compatHandle, queryInt, requireApiKey } from "@/server/http/compat";
import { parseOpenAiBatchId } from "@/server/compat/ids";
import { toOpenAiBatch } from "@/server/compat/projection";
import { createOpenAiBatch } from "@/server/compat/service";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

const BODY_MAX_BYTES = 64 * 1024;

/** OpenAI batches.create from an uploaded file; every line is validated before anything runs. */
export const POST = compatHandle("openai", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const input = await readJson(req, openAiBatchCreateSchema, BODY_MAX_BYTES);
  const created = await createOpenAiBatch(getDatabase().db, { userId, config: getConfig(), input });
  return Response.json(toOpenAiBatch(created));
});

/** OpenAI batches.list: newest first, `after` a batch id, `limit` 1..100 (default 20). */
export const GET = compatHandle("openai", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const url = new URL(req.url);
  const limit = queryInt(url, "limit", { min: 1, max: 100, fallback: 20 });
  const after = url.searchParams.get("after");
  const afterId = after ? parseOpenAiBatchId(after) : null;
  if (after && !afterId) throw new CompatParamError("after", "after: no such batch");
  const db = getDatabase().db;
  await expireCompatBatches(db, { userId, api: "openai" });
  const { rows, hasMore } = await listCompatBatches(db, {
    userId,
    api: "openai",
    limit,
    afterId,
    param: "after",
  });
  const data = rows.map((r) => toOpenAiBatch(r));
  return Response.json({ object: "list", data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
});
