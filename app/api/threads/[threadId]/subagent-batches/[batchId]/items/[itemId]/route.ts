import { z } from "zod";
import { itemDetailSchema } from "@/lib/api/batches";
import { batchScope, project } from "@/server/batches/http-scope";
import { getItemDetail } from "@/server/batches/item-detail";
import { handle, json, parseParam } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; itemId: string }> };

/** One item with the tool calls of its latest run (name, status, duration, bounded previews). */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const params = await ctx.params;
  const { db, config, userId, threadId, batchId } = await batchScope(req, params);
  const itemId = parseParam(z.uuid(), params.itemId, "item");
  const previewMaxChars = config.subagent_batches.result_preview_max_chars;
  return json(project(itemDetailSchema, await getItemDetail(db, { userId, threadId, batchId, itemId, previewMaxChars })));
});
