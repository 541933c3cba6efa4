import { clientAddress } from "@/server/net/client-address";
import { registerUser, registrationSchema } from "@/server/auth/registration";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** Sign-up under auth.registration (open | invite | closed); the page signs the new user in right after. */
export const POST = handle(async (req: Request) => {
  const input = await readJson(req, registrationSchema, 8 * 1024);
  const user = await registerUser(getDatabase(), {
    input,
    policy: getConfig().auth.registration,
    address: clientAddress(req.headers),
  });
  return json({ id: user.id, email: user.email, created_at: user.createdAt.toISOString() }, 201);
});
