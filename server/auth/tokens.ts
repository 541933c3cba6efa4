import { createHash, randomBytes } from "node:crypto";
import { and, eq, isNull, lt, or, sql } from "drizzle-orm";
import { z } from "zod";
import type { DbOrTx } from "@/server/db/client";
import { apiTokens, users } from "@/server/db/schema";
import { AppError } from "@/server/errors";

/** Personal API tokens: `flt_` + 32 random bytes; only the SHA-256 of the token is stored. */
export const TOKEN_PREFIX = "flt_";
const TOKEN_PATTERN = /^flt_[A-Za-z0-9_-]{43}$/;

export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

const tokenNameSchema = z.string().trim().min(1).max(100);

/** Creates a token for the user and returns it; the plain token is never stored and cannot be shown again. */
export async function createApiToken(db: DbOrTx, input: { userId: string; name?: string }): Promise<string> {
  const name = input.name === undefined ? "cli" : tokenNameSchema.safeParse(input.name).data;
  if (name === undefined) throw new AppError("validation_failed", "name: must be 1 to 100 characters");
  if (!z.uuid().safeParse(input.userId).success) throw new AppError("not_found", "user not found");
  const [user] = await db.select({ id: users.id }).from(users).where(eq(users.id, input.userId)).limit(1);
  if (!user) throw new AppError("not_found", "user not found");
  const token = `${TOKEN_PREFIX}${randomBytes(32).toString("base64url")}`;
  await db.insert(apiTokens).values({ userId: user.id, tokenHash: hashToken(token), name });
  return token;
}

/** The owner of a valid token, otherwise null. Records last use at most once a minute. */
export async function userIdForToken(db: DbOrTx, token: string): Promise<string | null> {
  if (!TOKEN_PATTERN.test(token)) return null;
  const tokenHash = hashToken(token);
  const [row] = await db
    .select({ id: apiTokens.id, userId: apiTokens.userId })
    .from(apiTokens)
    .where(eq(apiTokens.tokenHash, tokenHash))
    .limit(1);
  if (!row) return null;
  await db
    .update(apiTokens)
    .set({ lastUsedAt: sql`now()` })
    .where(
      and(
        eq(apiTokens.id, row.id),
        or(isNull(apiTokens.lastUsedAt), lt(apiTokens.lastUsedAt, sql`now() - interval '1 minute'`)),
      ),
    );
  return row.userId;
}
