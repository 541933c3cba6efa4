import { CompatParamError } from "@/server/compat/errors";
import { FILE_LIST_MAX, listFiles, uploadFile } from "@/server/compat/files";
import { compatHandle, queryInt, requireApiKey } from "@/server/http/compat";
import { parseFileId } from "@/server/compat/ids";
import { toOpenAiFile } from "@/server/compat/projection";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";

export const dynamic = "force-dynamic";

/** OpenAI files.create: multipart `file` + purpose=batch, streamed into the database. */
export const POST = compatHandle("openai", async (req: Request) => {
  const { userId } = await requireApiKey(req);
  const row = await uploadFile(getDatabase().db, {
    userId,
    contentType: req.headers.get("content-type"),
    body: req.body,
    config: getConfig(),
  });
  return Response.json(toOpenAiFile(row));
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
