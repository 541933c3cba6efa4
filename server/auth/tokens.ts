import { createHash, randomBytes } from "node:crypto";
import { and, desc, eq, gt, isNull, or, sql } from "drizzle-orm";
import { z } from "zod";
import type { DbOrTx } from "@/server/db/client";
import { apiTokens, users } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { storableText } from "@/server/db/storable";
import { createTokenBodySchema, TOKEN_DEFAULT_DAYS, TOKEN_MAX_DAYS, type TokenProjection } from "@/lib/api/auth";

/** Personal API tokens: `flt_` + 32 random bytes; only the SHA-256 of the token is stored. */
export const TOKEN_PREFIX = "flt_";
const TOKEN_PATTERN = /^flt_[A-Za-z0-9_-]{43}$/;

export function hashToken(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

export type TokenView = TokenProjection;

/** Creates a token for the user and returns it; the plain token is never stored and cannot be shown again. */
export async function createApiToken(db: DbOrTx, input: NewTokenInput): Promise<string> {
  return (await createApiTokenRecord(db, input)).token;
}

export interface NewTokenInput {
  userId: string;
  name?: string;
  /** Omitted: TOKEN_DEFAULT_DAYS. Null: never expires (not for a token made with a token). */
  expiresInDays?: number | null;
  /** The bearer token of the request asking for this one: the new token never outlives it. */
  madeWithToken?: string;
}

/** The bearer token a request presents; authenticate() judges such a request by it alone. */
export function presentedToken(req: Request): string | undefined {
  return /^Bearer\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "")?.[1];
}

const liveToken = or(isNull(apiTokens.expiresAt), gt(apiTokens.expiresAt, sql`now()`));

export async function createApiTokenRecord(db: DbOrTx, input: NewTokenInput): Promise<{ token: string; view: TokenView }> {
  const checked = createTokenBodySchema.safeParse({ name: input.name ?? "cli", expires_in_days: input.expiresInDays });
  if (!checked.success)
    throw new AppError(
      "validation_failed",
      checked.error.issues[0]?.path[0] === "name" ? "name: must be 1 to 100 characters" : `expires_in_days: must be a whole number from 1 to ${TOKEN_MAX_DAYS}, or null`,
    );
  const { name } = checked.data;
  const days = input.expiresInDays === undefined ? TOKEN_DEFAULT_DAYS : input.expiresInDays;
  // A stolen short-lived token must not be able to mint a permanent one.
  if (days === null && input.madeWithToken !== undefined)
    throw new AppError("validation_failed", "expires_in_days: a token that never expires can only be created from a browser session");
  if (!z.uuid().safeParse(input.userId).success) throw new AppError("not_found", "user not found");
  const [user] = await db.select({ id: users.id }).from(users).where(eq(users.id, input.userId)).limit(1);
  if (!user) throw new AppError("not_found", "user not found");
  const token = `${TOKEN_PREFIX}${randomBytes(32).toString("base64url")}`;
  const requested = days === null ? null : sql`now() + make_interval(days => ${days})`;
  const row = await db.transaction(async (tx) => {
    let expiresAt = requested;
    if (input.madeWithToken !== undefined) {
      // Shared lock: the maker cannot be revoked between this check and the insert.
      const [maker] = await tx
        .select({ id: apiTokens.id })
        .from(apiTokens)
        .where(and(eq(apiTokens.tokenHash, hashToken(input.madeWithToken)), eq(apiTokens.userId, user.id), liveToken))
        .for("share")
        .limit(1);
      if (!maker) throw new AppError("unauthorized", "the token making this request is revoked or expired");
      // least() skips a null (a maker that never expires); the subquery keeps the maker's microseconds.
      expiresAt = sql`least(${requested}, (select expires_at from api_tokens where id = ${maker.id}))`;
    }
    const [inserted] = await tx.insert(apiTokens).values({ userId: user.id, tokenHash: hashToken(token), name: storableText(name), expiresAt }).returning();
    return inserted!;
  });
  return { token, view: toView(row) };
}

function toView(r: typeof apiTokens.$inferSelect): TokenView {
  return {
    id: r.id,
    name: r.name,
    created_at: r.createdAt.toISOString(),
    last_used_at: r.lastUsedAt?.toISOString() ?? null,
    expires_at: r.expiresAt?.toISOString() ?? null,
    expired: r.expiresAt !== null && r.expiresAt.getTime() <= Date.now(),
  };
}

/** The user's tokens, newest first (never the token itself). */
export async function listApiTokens(db: DbOrTx, args: { userId: string }): Promise<TokenView[]> {
  const rows = await db
    .select()
    .from(apiTokens)
    .where(eq(apiTokens.userId, args.userId))
    .orderBy(desc(apiTokens.createdAt))
    .limit(200);
  return rows.map(toView);
}

/** Deletes one of the user's tokens; another user's id or an unknown one is 404. */
export async function revokeApiToken(db: DbOrTx, args: { userId: string; tokenId: string }): Promise<void> {
  if (!z.uuid().safeParse(args.tokenId).success) throw new AppError("not_found", "token not found");
  const deleted = await db
    .delete(apiTokens)
    .where(and(eq(apiTokens.id, args.tokenId), eq(apiTokens.userId, args.userId)))
    .returning({ id: apiTokens.id });
  if (deleted.length === 0) throw new AppError("not_found", "token not found");
}

/**
 * The owner of a valid, unexpired token, otherwise null. Records last use at most once a minute,
 * in the same statement as the lookup: every API request pays one round trip for its token, not
 * two (issue 44: the chat's first token waited on both).
 */
export async function userIdForToken(db: DbOrTx, token: string): Promise<string | null> {
  if (!TOKEN_PATTERN.test(token)) return null;
  const tokenHash = hashToken(token);
  const rows = await db.execute<{ user_id: string }>(sql`
    with found as (
      select ${apiTokens.id} as id, ${apiTokens.userId} as user_id, ${apiTokens.lastUsedAt} as last_used_at
        from ${apiTokens}
       where ${apiTokens.tokenHash} = ${tokenHash} and ${liveToken}
       limit 1
    ), touched as (
      update ${apiTokens} set last_used_at = now()
        from found
       where ${apiTokens.id} = found.id and (found.last_used_at is null or found.last_used_at < now() - interval '1 minute')
    )
    select user_id from found`);
  return rows[0]?.user_id ?? null;
}
