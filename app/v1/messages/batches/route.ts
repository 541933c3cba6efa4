import { CompatParamError } from "@/server/compat/errors";
import { listCompatBatches } from "@/server/compat/batches";
import { expireCompatBatches } from "@/server/compat/expiry";
import { compatHandle, queryInt, requestOrigin, requireApiKey } from "@/server/http/compat";
import { parseAnthropicBatchId } from "@/server/compat/ids";
import { toAnthropicBatch } from "@/server/compat/projection";
import { createAnthropicBatch } from "@/server/compat/service";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { BodySpool, receiveBody } from "@/server/http/spool";
import { requestElements } from "@/server/compat/anthropic-body";
import { AppError } from "@/server/errors";

export const dynamic = "force-dynamic";

/**
 * Anthropic messages.batches.create: the body is received whole (spooled, up to
 * compat.max_file_bytes) and read request by request with bounded memory; every request is
 * validated first, and a bad one refuses the call naming it.
 */
export const POST = compatHandle("anthropic", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const config = getConfig();
  const spool = new BodySpool();
  try {
    const body = await receiveBody(req, spool, {
      maxBytes: config.compat.max_file_bytes,
      tooLarge: () =>
        new AppError("payload_too_large", `request body exceeds compat.max_file_bytes (${config.compat.max_file_bytes} bytes)`),
    });
    const limits = { maxValueBytes: config.http.max_body_bytes, limitName: "http.max_body_bytes" };
    const created = await createAnthropicBatch(getDatabase().db, {
      userId,
      config,
      requests: () => requestElements(body.chunks(), limits),
    });
    return Response.json(toAnthropicBatch(created, requestOrigin(req)));
  } finally {
    await spool.dispose();
  }
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
