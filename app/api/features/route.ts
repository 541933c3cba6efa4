import { featuresSchema } from "@/lib/api/batches";
import { requireUser } from "@/server/auth/authenticate";
import { project } from "@/server/http/batch-scope";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { getFeatures } from "@/server/features";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

export const GET = handle(async (req: Request) => {
  await requireUser(req);
  const features = await getFeatures(getDatabase().db, getConfig());
  return json(project(featuresSchema, features), 200, { "cache-control": "no-store" });
});
