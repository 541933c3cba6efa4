import { createTokenBodySchema } from "@/lib/api/auth";
import { requireUser } from "@/server/auth/authenticate";
import { createApiTokenRecord, listApiTokens, presentedToken } from "@/server/auth/tokens";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  return json({ tokens: await listApiTokens(getDatabase().db, { userId }) });
});

/**
 * Creates a personal API token; the answer is the only time the token itself is shown. Made with
 * a bearer token, it expires no later than that token and cannot be one that never expires.
 */
export const POST = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const body = await readJson(req, createTokenBodySchema, 4 * 1024);
  const { token, view } = await createApiTokenRecord(getDatabase().db, {
    userId,
    name: body.name,
    expiresInDays: body.expires_in_days,
    madeWithToken: presentedToken(req),
  });
  return json({ ...view, token }, 201);
});
