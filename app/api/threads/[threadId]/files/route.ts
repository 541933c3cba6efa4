import { fileListSchema } from "@/lib/api/files";
import { project, threadScope } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";
import { listFiles, putFiles, workspaceLimits } from "@/server/workspace/files";
import { readUploadedFiles } from "@/server/http/multipart";
import { toFileProjection } from "@/server/workspace/projection";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The thread's files in path order. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId } = await threadScope(req, await ctx.params);
  const files = await listFiles(db, { userId, threadId });
  return json(project(fileListSchema, { files: files.map(toFileProjection) }));
});

/** Upload (multipart/form-data, streamed): 201 with the written files; all or nothing. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId } = await threadScope(req, await ctx.params);
  const limits = workspaceLimits(config);
  const files = await putFiles(db, { userId, threadId, limits }, readUploadedFiles(req, limits));
  return json(project(fileListSchema, { files: files.map(toFileProjection) }), 201);
});
