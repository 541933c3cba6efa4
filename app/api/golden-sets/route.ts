import { createGoldenSetSchema, goldenSetCreatedSchema, goldenSetListSchema } from "@/lib/api/golden-sets";
import { requireUser } from "@/server/auth/authenticate";
import { createGoldenSet, listGoldenSets } from "@/server/batches/golden-sets";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** The caller's golden sets, the most recently changed first. */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  return json(project(goldenSetListSchema, { golden_sets: await listGoldenSets(getDatabase().db, userId) }));
});

/** A new golden set (version 1) from a reviewed batch (`from_batch`) or from `items`: 201. */
export const POST = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const body = await readJson(req, createGoldenSetSchema, getConfig().http.max_body_bytes);
  return json(project(goldenSetCreatedSchema, await createGoldenSet(getDatabase().db, { userId, ...body })), 201);
});
