import { fileListSchema } from "@/lib/api/files";
import { project, threadScope } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";
import { listFiles, putFiles, workspaceLimits } from "@/server/workspace/files";
import { receivedFiles, receiveWorkspaceUpload } from "@/server/http/multipart";
import { BodySpool } from "@/server/http/spool";
import { toFileProjection } from "@/server/workspace/projection";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The thread's files in path order. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId } = await threadScope(req, await ctx.params);
  const files = await listFiles(db, { userId, threadId });
  return json(project(fileListSchema, { files: files.map(toFileProjection) }));
});

/**
 * Upload (multipart/form-data): 201 with the written files; all or nothing. The body is
 * received whole (spooled) before the write transaction, so a slow client holds no connection.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId } = await threadScope(req, await ctx.params);
  const limits = workspaceLimits(config);
  const spool = new BodySpool();
  try {
    const received = await receiveWorkspaceUpload(req, limits, spool);
    const written = await putFiles(db, { userId, threadId, limits }, receivedFiles(received));
    // Written in path order (see receivedFiles); answered in the order they were sent.
    const byPath = new Map(written.map((f) => [f.path, f]));
    const files = received.map((r) => byPath.get(r.path)!);
    return json(project(fileListSchema, { files: files.map(toFileProjection) }), 201);
  } finally {
    await spool.dispose();
  }
});
