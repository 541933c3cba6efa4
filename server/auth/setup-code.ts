import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { DbOrTx } from "@/server/db/client";
import { setupCodes } from "@/server/db/schema";
import { anyUserExists } from "./users";

/**
 * The setup code: while no account exists, creating the first one (the admin) over HTTP needs
 * it, so a stranger who reaches a fresh deployment first cannot take it over. The web process
 * prints it as a link when it starts; `cli setup-code` prints it alone. One row in PostgreSQL so
 * both agree; made on first need; deleted with the first account (server/auth/users.ts).
 */

const CODE_BYTES = 20;

/** The code to show, made now if there is none; null once any account exists. */
export async function currentSetupCode(db: DbOrTx): Promise<string | null> {
  if (await anyUserExists(db)) return null;
  await db
    .insert(setupCodes)
    .values({ code: `setup_${randomBytes(CODE_BYTES).toString("base64url")}` })
    .onConflictDoNothing();
  const [row] = await db.select({ code: setupCodes.code }).from(setupCodes).limit(1);
  return row?.code ?? null;
}

/** Whether `given` is the stored setup code (constant time; false when there is none). */
export async function setupCodeMatches(db: DbOrTx, given: string | undefined): Promise<boolean> {
  if (!given) return false;
  const [row] = await db.select({ code: setupCodes.code }).from(setupCodes).limit(1);
  if (!row) return false;
  const digest = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(digest(given), digest(row.code));
}

/** The origin people reach the web process at: NEXTAUTH_URL's when set, else localhost and PORT. */
export function publicOrigin(env: { NEXTAUTH_URL?: string; PORT?: string } = process.env): string {
  if (env.NEXTAUTH_URL) {
    try {
      return new URL(env.NEXTAUTH_URL).origin;
    } catch {
      // malformed: next-auth warns about it; fall back to the local address
    }
  }
  return `http://localhost:${env.PORT || 3000}`;
}

/** The line a starting web process prints while no account exists; null once one does. */
export async function setupLine(db: DbOrTx, origin = publicOrigin()): Promise<string | null> {
  const code = await currentSetupCode(db);
  return code ? `Setup: ${origin}/register?setup=${code}` : null;
}
