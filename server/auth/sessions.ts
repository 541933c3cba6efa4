import "server-only";
import { and, desc, eq, gt, ne, sql } from "drizzle-orm";
import { z } from "zod";
import type { Db, DbOrTx } from "@/server/db/client";
import { authSessions, users } from "@/server/db/schema";

/**
 * Browser sessions. The JWT stays the credential, but it names a session row (`sid`) and the
 * user's session version (`sv`) at sign-in; every request checks both in one query, so signing
 * out (row deleted) or signing out everywhere (version raised, rows deleted) ends a session at
 * its next request rather than when the 30-day JWT expires.
 */

export interface SessionView {
  id: string;
  user_agent: string | null;
  created_at: string;
  expires_at: string;
  current: boolean;
}

export async function createSession(
  db: DbOrTx,
  args: { userId: string; userAgent?: string | null; maxAgeSeconds: number },
): Promise<{ id: string; version: number }> {
  const [row] = await db
    .insert(authSessions)
    .values({
      userId: args.userId,
      userAgent: args.userAgent ? args.userAgent.slice(0, 300) : null,
      expiresAt: sql`now() + make_interval(secs => ${args.maxAgeSeconds})`,
    })
    .returning({ id: authSessions.id });
  const [user] = await db.select({ version: users.sessionVersion }).from(users).where(eq(users.id, args.userId));
  return { id: row!.id, version: user?.version ?? 0 };
}

/** True when the user exists, the session row is live and the version still matches. */
export async function sessionIsLive(db: DbOrTx, args: { userId: string; sessionId: unknown; version: unknown }): Promise<boolean> {
  const uuid = z.uuid();
  if (!uuid.safeParse(args.userId).success || !uuid.safeParse(args.sessionId).success) return false;
  if (typeof args.version !== "number") return false;
  const rows = await db.execute<{ ok: boolean }>(sql`
    select true as ok from users u join auth_sessions s on s.user_id = u.id
     where u.id = ${args.userId} and s.id = ${args.sessionId as string}
       and u.session_version = ${args.version} and s.expires_at > now()`);
  return rows.length > 0;
}

export async function endSession(db: DbOrTx, sessionId: unknown): Promise<void> {
  if (!z.uuid().safeParse(sessionId).success) return;
  await db.delete(authSessions).where(eq(authSessions.id, sessionId as string));
}

/** Ends every session of the user except `keepSessionId` (after a password change). Returns how many ended. */
export async function endOtherSessions(db: DbOrTx, args: { userId: string; keepSessionId?: string }): Promise<number> {
  const ended = await db
    .delete(authSessions)
    .where(and(eq(authSessions.userId, args.userId), args.keepSessionId ? ne(authSessions.id, args.keepSessionId) : undefined))
    .returning({ id: authSessions.id });
  return ended.length;
}

/** Ends every session of the user (every browser signs in again). Personal API tokens stay until revoked. */
export async function signOutEverywhere(db: Db, userId: string): Promise<number> {
  return db.transaction(async (tx) => {
    await tx
      .update(users)
      .set({ sessionVersion: sql`${users.sessionVersion} + 1` })
      .where(eq(users.id, userId));
    const ended = await tx.delete(authSessions).where(eq(authSessions.userId, userId)).returning({ id: authSessions.id });
    return ended.length;
  });
}

export async function listSessions(db: DbOrTx, args: { userId: string; currentSessionId?: string | null }): Promise<SessionView[]> {
  const rows = await db
    .select()
    .from(authSessions)
    .where(and(eq(authSessions.userId, args.userId), gt(authSessions.expiresAt, sql`now()`)))
    .orderBy(desc(authSessions.createdAt))
    .limit(100);
  return rows.map((r) => ({
    id: r.id,
    user_agent: r.userAgent,
    created_at: r.createdAt.toISOString(),
    expires_at: r.expiresAt.toISOString(),
    current: r.id === args.currentSessionId,
  }));
}
