import { threadScope } from "@/server/http/batch-scope";
import { handle } from "@/server/http/route";
import { deleteFile, openFileStream } from "@/server/workspace/files";
import { downloadHeaders } from "@/server/http/download";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; path: string[] }> };

/** The file's bytes, streamed, as an attachment. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const { db, userId, threadId } = await threadScope(req, params);
  const { file, body } = await openFileStream(db, { userId, threadId, path: params.path.join("/") });
  return new Response(body, { status: 200, headers: downloadHeaders(file) });
});

export const DELETE = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const { db, userId, threadId } = await threadScope(req, params);
  await deleteFile(db, { userId, threadId, path: params.path.join("/") });
  return new Response(null, { status: 204 });
});
