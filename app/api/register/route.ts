import { createUser, newUserSchema } from "@/server/auth/users";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** Self-service sign-up; the page signs the new user in right after. */
export const POST = handle(async (req: Request) => {
  const body = await readJson(req, newUserSchema, 8 * 1024);
  const user = await createUser(getDatabase().db, body);
  return json({ id: user.id, email: user.email, created_at: user.createdAt.toISOString() }, 201);
});
