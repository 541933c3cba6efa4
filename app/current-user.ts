import { headers } from "next/headers";
import { authenticate } from "@/server/auth/authenticate";
import { getUserById } from "@/server/auth/users";
import { getDatabase } from "@/server/db/client";

/** The signed-in user for a server component (same check as the API: session cookie, account exists). */
export async function currentUser(): Promise<{ id: string; email: string } | null> {
  const incoming = await headers();
  const session = await authenticate(new Request("http://flotilla.local/", { headers: new Headers(incoming) }));
  if (!session) return null;
  const user = await getUserById(getDatabase().db, session.userId);
  return user ? { id: user.id, email: user.email } : null;
}
