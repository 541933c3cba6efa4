import { comparePageSchema } from "@/lib/api/compare";
import { comparePairs } from "@/server/batches/compare";
import { comparePageScope, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string; otherId: string }> };

/** One keyset page of matched item pairs (`change`, `cursor`, `limit` ≤ 200), in a's position order. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, args, query, previewMaxChars } = await comparePageScope(req, await ctx.params);
  const { items, next_cursor } = await comparePairs(db, { ...args, ...query, previewMaxChars });
  return json(project(comparePageSchema, { items, next_cursor }));
});
