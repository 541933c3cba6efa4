import { z } from "zod";
import { webhookSchema, webhookWithSecretSchema } from "@/lib/api/batches";
import { requireUser } from "@/server/auth/authenticate";
import { deleteWebhook, getWebhook, setWebhook } from "@/server/batches/webhooks";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

const putSchema = z.object({ url: z.string({ error: "must be a string" }).min(1, "must not be empty").max(2_000) }).strict();

/** The user's webhook (without its secret), or null. */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const hook = await getWebhook(getDatabase().db, userId);
  return json({
    webhook: hook
      ? webhookSchema.parse({
          url: hook.url,
          legacy_secret: hook.legacySecret,
          created_at: hook.createdAt.toISOString(),
          updated_at: hook.updatedAt.toISOString(),
        })
      : null,
  });
});

/** Sets the URL; answers the new signing secret once. */
export const PUT = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const { url } = await readJson(req, putSchema, 8 * 1024);
  const hook = await setWebhook(getDatabase().db, { config: getConfig(), userId, url });
  return json({
    webhook: webhookWithSecretSchema.parse({
      url: hook.url,
      legacy_secret: hook.legacySecret,
      secret: hook.secret,
      created_at: hook.createdAt.toISOString(),
      updated_at: hook.updatedAt.toISOString(),
    }),
  });
});

export const DELETE = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  await deleteWebhook(getDatabase().db, userId);
  return json({ webhook: null });
});
