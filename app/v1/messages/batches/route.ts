import { CompatParamError } from "@/server/compat/errors";
import { listCompatBatches } from "@/server/compat/batches";
import { expireCompatBatches } from "@/server/compat/expiry";
import { compatHandle, queryInt, requestOrigin, requireApiKey } from "@/server/http/compat";
import { parseAnthropicBatchId } from "@/server/compat/ids";
import { toAnthropicBatch } from "@/server/compat/projection";
import { createAnthropicBatch } from "@/server/compat/service";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { readJson } from "@/server/http/route";
import { z } from "zod";

export const dynamic = "force-dynamic";

/** Anthropic messages.batches.create: every request validated first; a bad one refuses the call naming it. */
export const POST = compatHandle("anthropic", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const config = getConfig();
  const body = await readJson(req, z.unknown(), config.compat.max_file_bytes);
  const created = await createAnthropicBatch(getDatabase().db, { userId, config, body });
  return Response.json(toAnthropicBatch(created, requestOrigin(req)));
});

/** Anthropic messages.batches.list: newest first; `after_id` (older) or `before_id` (newer); limit 1..1000 (20). */
export const GET = compatHandle("anthropic", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const url = new URL(req.url);
  const limit = queryInt(url, "limit", { min: 1, max: 1000, fallback: 20 });
  const cursor = (name: string) => {
    const raw = url.searchParams.get(name);
    if (!raw) return null;
    const id = parseAnthropicBatchId(raw);
    if (!id) throw new CompatParamError(name, `${name}: no such batch`);
    return id;
  };
  const afterId = cursor("after_id");
  const beforeId = cursor("before_id");
  if (afterId && beforeId) throw new CompatParamError("before_id", "before_id: send after_id or before_id, not both");
  const db = getDatabase().db;
  await expireCompatBatches(db, { userId, api: "anthropic" });
  const { rows, hasMore } = await listCompatBatches(db, {
    userId,
    api: "anthropic",
    limit,
    afterId,
    beforeId,
    param: afterId ? "after_id" : "before_id",
  });
  const origin = requestOrigin(req);
  const data = rows.map((r) => toAnthropicBatch(r, origin));
  return Response.json({ data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
});
