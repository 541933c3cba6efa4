import { requireUser } from "@/server/auth/authenticate";
import { changePassword, passwordChangeSchema } from "@/server/auth/password-change";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** Changes the caller's password (the current one is required) and signs out their other browsers. */
export const POST = handle(async (req: Request) => {
  const { userId, sessionId } = await requireUser(req);
  const input = await readJson(req, passwordChangeSchema, 4 * 1024);
  const ended = await changePassword(getDatabase().db, { userId, keepSessionId: sessionId, input });
  return json({ other_sessions_ended: ended });
});
