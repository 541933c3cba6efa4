import { randomBytes } from "node:crypto";
import { and, desc, eq, gt, isNull, sql } from "drizzle-orm";
import { alias } from "drizzle-orm/pg-core";
import type { DbOrTx } from "@/server/db/client";
import { invites, users } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { hashToken } from "./tokens";

/** Invite codes: `inv_` + 24 random bytes, shown once; only their SHA-256 is stored. */
export const INVITE_PREFIX = "inv_";
export const INVITE_DEFAULT_DAYS = 7;
export const INVITE_MAX_DAYS = 90;

export interface InviteView {
  id: string;
  created_at: string;
  expires_at: string;
  used_at: string | null;
  used_by: string | null;
  status: "open" | "used" | "expired";
}

export async function createInvite(
  db: DbOrTx,
  input: { createdBy?: string | null; expiresInDays?: number } = {},
): Promise<{ code: string; expiresAt: Date }> {
  const days = input.expiresInDays ?? INVITE_DEFAULT_DAYS;
  if (!Number.isInteger(days) || days < 1 || days > INVITE_MAX_DAYS)
    throw new AppError("validation_failed", `expires_in_days: must be a whole number from 1 to ${INVITE_MAX_DAYS}`);
  const code = `${INVITE_PREFIX}${randomBytes(24).toString("base64url")}`;
  const [row] = await db
    .insert(invites)
    .values({
      codeHash: hashToken(code),
      createdBy: input.createdBy ?? null,
      expiresAt: sql`now() + make_interval(days => ${days})`,
    })
    .returning({ expiresAt: invites.expiresAt });
  return { code, expiresAt: row!.expiresAt };
}

/**
 * Spends a valid code inside the caller's transaction (single use: the UPDATE's row lock makes
 * two registrations with one code serialize, and the second finds it used). False when the code
 * is unknown, used or expired.
 */
export async function redeemInvite(tx: DbOrTx, code: string): Promise<string | null> {
  if (!code.startsWith(INVITE_PREFIX) || code.length > 200) return null;
  const [row] = await tx
    .update(invites)
    .set({ usedAt: sql`now()` })
    .where(and(eq(invites.codeHash, hashToken(code)), isNull(invites.usedAt), gt(invites.expiresAt, sql`now()`)))
    .returning({ id: invites.id });
  return row?.id ?? null;
}

/** Read-only: whether the code could be redeemed right now (a cheap refusal before hashing). */
export async function inviteIsOpen(db: DbOrTx, code: string): Promise<boolean> {
  if (!code.startsWith(INVITE_PREFIX) || code.length > 200) return false;
  const [row] = await db
    .select({ id: invites.id })
    .from(invites)
    .where(and(eq(invites.codeHash, hashToken(code)), isNull(invites.usedAt), gt(invites.expiresAt, sql`now()`)))
    .limit(1);
  return Boolean(row);
}

export async function markInviteUsedBy(tx: DbOrTx, inviteId: string, userId: string): Promise<void> {
  await tx.update(invites).set({ usedBy: userId }).where(eq(invites.id, inviteId));
}

/** The most recent invites with who used them (admin view; no codes: they are not stored). */
export async function listInvites(db: DbOrTx, args: { limit?: number } = {}): Promise<InviteView[]> {
  const usedBy = alias(users, "used_by_user");
  const rows = await db
    .select({
      id: invites.id,
      createdAt: invites.createdAt,
      expiresAt: invites.expiresAt,
      usedAt: invites.usedAt,
      usedBy: usedBy.email,
      expired: sql<boolean>`${invites.expiresAt} <= now()`,
    })
    .from(invites)
    .leftJoin(usedBy, eq(usedBy.id, invites.usedBy))
    .orderBy(desc(invites.createdAt))
    .limit(args.limit ?? 50);
  return rows.map((r) => ({
    id: r.id,
    created_at: r.createdAt.toISOString(),
    expires_at: r.expiresAt.toISOString(),
    used_at: r.usedAt?.toISOString() ?? null,
    used_by: r.usedBy ?? null,
    status: r.usedAt ? "used" : r.expired ? "expired" : "open",
  }));
}
