import { CompatParamError } from "@/server/compat/errors";
import { FILE_LIST_MAX, listFiles, storeFile } from "@/server/compat/files";
import { compatHandle, queryInt, requireApiKey } from "@/server/http/compat";
import { parseFileId } from "@/server/compat/ids";
import { toOpenAiFile } from "@/server/compat/projection";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { receiveBatchFile } from "@/server/http/multipart";
import { BodySpool } from "@/server/http/spool";

export const dynamic = "force-dynamic";

/**
 * OpenAI files.create: multipart `file` + purpose=batch. The body is received whole (spooled)
 * before the write transaction, so a slow client holds no connection.
 */
export const POST = compatHandle("openai", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const config = getConfig();
  const spool = new BodySpool();
  try {
    const limits = { maxBytes: config.compat.max_file_bytes, maxLines: config.compat.max_requests_per_file };
    const file = await receiveBatchFile(req, limits, spool);
    const row = await storeFile(getDatabase().db, {
      userId,
      filename: file.filename,
      bytes: file.bytes,
      lines: file.lines,
      chunks: file.content.chunks(),
      maxStorageBytes: config.quotas.max_storage_bytes,
    });
    return Response.json(toOpenAiFile(row));
  } finally {
    await spool.dispose();
  }
});

/** OpenAI files.list: newest first unless order=asc, `after` a file id. */
export const GET = compatHandle("openai", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const url = new URL(req.url);
  const limit = queryInt(url, "limit", { min: 1, max: FILE_LIST_MAX, fallback: FILE_LIST_MAX });
  const order = url.searchParams.get("order") === "asc" ? "asc" : "desc";
  const afterRaw = url.searchParams.get("after");
  const after = afterRaw ? parseFileId(afterRaw) : null;
  if (afterRaw && after?.kind !== "upload") throw new CompatParamError("after", "after: no such file");
  const { rows, hasMore } = await listFiles(getDatabase().db, {
    userId,
    limit,
    order,
    after: after?.kind === "upload" ? after.id : null,
    purpose: url.searchParams.get("purpose"),
  });
  const data = rows.map(toOpenAiFile);
  return Response.json({ object: "list", data, has_more: hasMore, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null });
});
