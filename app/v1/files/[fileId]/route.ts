import { fileObject, removeFile } from "@/server/compat/openai-files";
import { compatHandle, requireApiKey } from "@/server/http/compat";
import { getDatabase } from "@/server/db/client";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ fileId: string }> };

/** OpenAI files.retrieve: an uploaded file, or a batch's generated output / error file. */
export const GET = compatHandle("openai", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  return Response.json(await fileObject(getDatabase().db, { userId, fileId: (await ctx.params).fileId }));
});

/** OpenAI files.delete. */
export const DELETE = compatHandle("openai", async (req: Request, ctx: Ctx) => {
  const { userId } = await requireApiKey(req);
  const { fileId } = await ctx.params;
  await removeFile(getDatabase().db, { userId, fileId });
  return Response.json({ id: fileId, object: "file", deleted: true });
});
