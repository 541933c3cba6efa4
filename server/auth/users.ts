import { eq } from "drizzle-orm";
import { z } from "zod";
import type { DbOrTx } from "@/server/db/client";
import { users } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { zodMessage } from "@/server/http/route";
import { hashPassword, needsRehash, verifyPassword } from "./password";

export const PASSWORD_MIN = 8;
export const PASSWORD_MAX = 200;

/** Emails are compared case-insensitively: stored trimmed and lower-cased. */
export const emailSchema = z
  .string({ error: "must be a string" })
  .trim()
  .max(254, { error: "must be at most 254 characters" })
  .pipe(z.email({ error: "must be a valid email address" }))
  .transform((e) => e.toLowerCase());

export const passwordSchema = z
  .string({ error: "must be a string" })
  .min(PASSWORD_MIN, { error: `must be at least ${PASSWORD_MIN} characters` })
  .max(PASSWORD_MAX, { error: `must be at most ${PASSWORD_MAX} characters` });

export const newUserSchema = z.object({ email: emailSchema, password: passwordSchema }).strict();

export interface UserRecord {
  id: string;
  email: string;
  createdAt: Date;
}

/** Creates an account; AppError validation_failed for a bad email/password, conflict when the email is taken. */
export async function createUser(db: DbOrTx, input: { email: string; password: string }): Promise<UserRecord> {
  const parsed = newUserSchema.safeParse(input);
  if (!parsed.success) throw new AppError("validation_failed", zodMessage(parsed.error));
  const { email, password } = parsed.data;
  const passwordHash = await hashPassword(password);
  // The unique index decides races between two sign-ups with one email.
  const [row] = await db
    .insert(users)
    .values({ email, passwordHash })
    .onConflictDoNothing({ target: users.email })
    .returning({ id: users.id, email: users.email, createdAt: users.createdAt });
  if (!row) throw new AppError("conflict", "an account with this email already exists");
  return row;
}

export async function findUserByEmail(db: DbOrTx, email: string): Promise<UserRecord | null> {
  const parsed = emailSchema.safeParse(email);
  if (!parsed.success) return null;
  const [row] = await db
    .select({ id: users.id, email: users.email, createdAt: users.createdAt })
    .from(users)
    .where(eq(users.email, parsed.data))
    .limit(1);
  return row ?? null;
}

export async function getUserById(db: DbOrTx, userId: string): Promise<UserRecord | null> {
  if (!z.uuid().safeParse(userId).success) return null;
  const [row] = await db
    .select({ id: users.id, email: users.email, createdAt: users.createdAt })
    .from(users)
    .where(eq(users.id, userId))
    .limit(1);
  return row ?? null;
}

export async function userExists(db: DbOrTx, userId: string): Promise<boolean> {
  if (!z.uuid().safeParse(userId).success) return false;
  const [row] = await db.select({ id: users.id }).from(users).where(eq(users.id, userId)).limit(1);
  return Boolean(row);
}

// Hash of a random password, verified against when the email is unknown so that a miss costs
// as much time as a wrong password (no account enumeration by timing).
let decoyHash: Promise<string> | undefined;

/** The user for a correct email + password, otherwise null. */
export async function verifyCredentials(
  db: DbOrTx,
  input: { email: unknown; password: unknown },
): Promise<{ id: string; email: string } | null> {
  if (typeof input.email !== "string" || typeof input.password !== "string") return null;
  if (input.password.length > PASSWORD_MAX) return null;
  const email = emailSchema.safeParse(input.email);
  const [row] = email.success
    ? await db
        .select({ id: users.id, email: users.email, passwordHash: users.passwordHash })
        .from(users)
        .where(eq(users.email, email.data))
        .limit(1)
    : [];
  if (!row) {
    decoyHash ??= hashPassword(`decoy-${Math.random()}`);
    await verifyPassword(input.password, await decoyHash);
    return null;
  }
  if (!(await verifyPassword(input.password, row.passwordHash))) return null;
  if (needsRehash(row.passwordHash)) {
    await db
      .update(users)
      .set({ passwordHash: await hashPassword(input.password) })
      .where(eq(users.id, row.id));
  }
  return { id: row.id, email: row.email };
}
