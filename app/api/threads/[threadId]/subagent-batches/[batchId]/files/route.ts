import { fileListSchema } from "@/lib/api/files";
import { batchScope, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";
import { listBatchArtifacts } from "@/server/workspace/files";
import { toFileProjection } from "@/server/workspace/projection";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** The files the batch's runs wrote (its artifacts), in path order. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const files = await listBatchArtifacts(db, { userId, threadId, batchId });
  return json(project(fileListSchema, { files: files.map(toFileProjection) }));
});
