import { addGoldenSetSchema, goldenSetAddedSchema } from "@/lib/api/golden-sets";
import { addToGoldenSet } from "@/server/batches/golden-sets";
import { goldenSetScope, project } from "@/server/http/batch-scope";
import { isMultipart, readGoldenUpload } from "@/server/http/golden-upload";
import { handle, json, readJson, validated } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ setId: string }> };

/** A new version: the answers of `from_batch`, `items` or an uploaded CSV / JSONL (multipart: file) added, an item_key already in the set taking the newer one. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, setId } = await goldenSetScope(req, await ctx.params);
  const maxBytes = config.http.max_body_bytes;
  const body = isMultipart(req)
    ? validated(addGoldenSetSchema, { items: (await readGoldenUpload(req, { maxBytes, allowed: [] })).items })
    : await readJson(req, addGoldenSetSchema, maxBytes);
  return json(project(goldenSetAddedSchema, await addToGoldenSet(db, { userId, setId, ...body })));
});
