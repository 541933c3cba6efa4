import { headers } from "next/headers";
import { authenticate } from "@/server/auth/authenticate";
import { getUserById } from "@/server/auth/users";
import { getDatabase } from "@/server/db/client";

export interface CurrentUser {
  id: string;
  email: string;
  isAdmin: boolean;
  /** The browser session this page was requested with. */
  sessionId: string | null;
}

/** The signed-in user for a server component (same check as the API: a live session of an existing account). */
export async function currentUser(): Promise<CurrentUser | null> {
  const incoming = await headers();
  const session = await authenticate(new Request("http://flotilla.local/", { headers: new Headers(incoming) }));
  if (!session) return null;
  const user = await getUserById(getDatabase().db, session.userId);
  return user ? { id: user.id, email: user.email, isAdmin: user.isAdmin, sessionId: session.sessionId ?? null } : null;
}
