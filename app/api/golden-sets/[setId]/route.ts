import { goldenSetDetailSchema } from "@/lib/api/golden-sets";
import { deleteGoldenSet, getGoldenSet } from "@/server/batches/golden-sets";
import { goldenSetScope, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ setId: string }> };

/** The set and its versions (each immutable: its item count, where its answers came from, when). */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, setId } = await goldenSetScope(req, await ctx.params);
  return json(project(goldenSetDetailSchema, await getGoldenSet(db, { userId, setId })));
});

/** Deletes the set with every version and item. */
export const DELETE = handle(async (req: Request, ctx: Ctx) => {
  const { db, userId, setId } = await goldenSetScope(req, await ctx.params);
  await deleteGoldenSet(db, { userId, setId });
  return json({ id: setId, deleted: true });
});
