import { createGoldenSetSchema, goldenSetCreatedSchema, goldenSetListSchema } from "@/lib/api/golden-sets";
import { requireUser } from "@/server/auth/authenticate";
import { createGoldenSet, listGoldenSets } from "@/server/batches/golden-sets";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { project } from "@/server/http/batch-scope";
import { isMultipart, readGoldenUpload } from "@/server/http/golden-upload";
import { handle, json, readJson, validated } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** The caller's golden sets, the most recently changed first. */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  return json(project(goldenSetListSchema, { golden_sets: await listGoldenSets(getDatabase().db, userId) }));
});

/** A new golden set (version 1) from a reviewed batch (`from_batch`), from `items`, or from an uploaded CSV / JSONL (multipart: name, file): 201. */
export const POST = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const maxBytes = getConfig().http.max_body_bytes;
  const body = isMultipart(req)
    ? validated(createGoldenSetSchema, await uploadBody(req, maxBytes))
    : await readJson(req, createGoldenSetSchema, maxBytes);
  return json(project(goldenSetCreatedSchema, await createGoldenSet(getDatabase().db, { userId, ...body })), 201);
});

async function uploadBody(req: Request, maxBytes: number) {
  const { fields, items } = await readGoldenUpload(req, { maxBytes, allowed: ["name"] });
  return { name: fields.name, items };
}
