import { itemPageSchema } from "@/lib/api/batches";
import { batchScope, parseItemPageQuery, project } from "@/server/http/batch-scope";
import { toItemPage } from "@/server/batches/projection";
import { listItems } from "@/server/batches/repository";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** One keyset page of items by position (`cursor`, `limit` ≤ 200, optional `status`), with bounded previews. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const query = parseItemPageQuery(new URL(req.url).searchParams);
  const previewMaxChars = config.subagent_batches.result_preview_max_chars;
  const page = await listItems(db, { userId, threadId, batchId, ...query, previewMaxChars });
  return json(project(itemPageSchema, toItemPage(page, previewMaxChars)));
});
