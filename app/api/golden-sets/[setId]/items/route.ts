import { goldenItemPageSchema } from "@/lib/api/golden-sets";
import { goldenItems } from "@/server/batches/golden-sets";
import { goldenSetScope, parseGoldenItemsQuery, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ setId: string }> };

/** One page of a version's items (`version`, the newest by default; `cursor`, `limit` ≤ 200), in item_key order. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, setId } = await goldenSetScope(req, await ctx.params);
  const query = parseGoldenItemsQuery(new URL(req.url).searchParams);
  const { version: _read, ...page } = await goldenItems(db, { userId, setId, ...query, limit: query.limit ?? 50 });
  return json(project(goldenItemPageSchema, page));
});
