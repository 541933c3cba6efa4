import { eq, sql } from "drizzle-orm";
import { z } from "zod";
import type { Db, DbOrTx } from "@/server/db/client";
import { setupCodes, users } from "@/server/db/schema";
import { AppError, zodMessage } from "@/server/errors";
import { storableText } from "@/server/db/storable";
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
  isAdmin: boolean;
  createdAt: Date;
}

const userColumns = { id: users.id, email: users.email, isAdmin: users.isAdmin, createdAt: users.createdAt };

/**
 * Inserts an account inside the caller's transaction; the first account ever created becomes the
 * admin. An advisory lock serializes sign-ups so two first accounts at once cannot both be admin.
 * AppError conflict when the email is taken.
 */
export async function insertUser(
  tx: DbOrTx,
  input: { email: string; passwordHash: string },
  gate: (first: boolean) => Promise<void> = async () => {},
): Promise<UserRecord> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext('flotilla:users:insert'))`);
  const [any] = await tx.select({ id: users.id }).from(users).limit(1);
  const first = !any;
  await gate(first);
  // The unique index decides races between two sign-ups with one email.
  const [row] = await tx
    .insert(users)
    .values({ email: input.email, passwordHash: input.passwordHash, isAdmin: first })
    .onConflictDoNothing({ target: users.email })
    .returning(userColumns);
  if (!row) throw new AppError("conflict", "an account with this email already exists");
  // The setup code only ever creates the first account.
  if (first) await tx.delete(setupCodes);
  return row;
}

export async function anyUserExists(db: DbOrTx): Promise<boolean> {
  const [row] = await db.select({ id: users.id }).from(users).limit(1);
  return Boolean(row);
}

/** Creates an account (the CLI path: no registration policy); AppError validation_failed or conflict. */
export async function createUser(db: Db, input: { email: string; password: string }): Promise<UserRecord> {
  const parsed = newUserSchema.safeParse(input);
  if (!parsed.success) throw new AppError("validation_failed", zodMessage(parsed.error));
  const { email, password } = parsed.data;
  const passwordHash = await hashPassword(password);
  return db.transaction((tx) => insertUser(tx, { email, passwordHash }));
}

export async function findUserByEmail(db: DbOrTx, email: string): Promise<UserRecord | null> {
  const parsed = emailSchema.safeParse(email);
  if (!parsed.success) return null;
  const [row] = await db
    .select(userColumns)
    .from(users)
    .where(eq(users.email, parsed.data))
    .limit(1);
  return row ?? null;
}

export async function getUserById(db: DbOrTx, userId: string): Promise<UserRecord | null> {
  if (!z.uuid().safeParse(userId).success) return null;
  const [row] = await db
    .select(userColumns)
    .from(users)
    .where(eq(users.id, userId))
    .limit(1);
  return row ?? null;
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
        // NUL or a lone surrogate (which PostgreSQL refuses) matches no stored email.
        .where(eq(users.email, storableText(email.data)))
        .limit(1)
    : [];
  if (!row) {
    decoyHash ??= hashPassword(`decoy-${Math.random()}`).catch((err) => {
      decoyHash = undefined; // a busy refusal must not stick
      throw err;
    });
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
