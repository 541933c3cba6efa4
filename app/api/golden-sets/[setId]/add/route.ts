import { addGoldenSetSchema, goldenSetAddedSchema } from "@/lib/api/golden-sets";
import { addToGoldenSet } from "@/server/batches/golden-sets";
import { goldenSetScope, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ setId: string }> };

/** A new version: the answers of `from_batch` or `items` added, an item_key already in the set taking the newer one. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, setId } = await goldenSetScope(req, await ctx.params);
  const body = await readJson(req, addGoldenSetSchema, config.http.max_body_bytes);
  return json(project(goldenSetAddedSchema, await addToGoldenSet(db, { userId, setId, ...body })));
});
