import { requireUser } from "@/server/auth/authenticate";
import { revokeApiToken } from "@/server/auth/tokens";
import { getDatabase } from "@/server/db/client";
import { handle } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** Revokes one of the caller's tokens: it answers 401 from the next request on. */
export const DELETE = handle(async (req: Request, ctx: { params: Promise<{ tokenId: string }> }) => {
  const { userId } = await requireUser(req);
  const { tokenId } = await ctx.params;
  await revokeApiToken(getDatabase().db, { userId, tokenId });
  return new Response(null, { status: 204 });
});
