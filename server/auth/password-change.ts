import { and, eq } from "drizzle-orm";
import type postgres from "postgres";
import { RateLimiterPostgres, RateLimiterRes } from "rate-limiter-flexible";
import { z } from "zod";
import { type Db, driverOf } from "@/server/db/client";
import { users } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { RateLimitedError } from "./limits";
import { hashPassword, verifyPassword, withHashAdmission } from "./password";
import { endOtherSessions } from "./sessions";
import { PASSWORD_MAX, passwordSchema } from "./users";

/** `POST /api/account/password`: the new password follows the same rules as at registration. */
export const passwordChangeSchema = z
  .object({
    current_password: z
      .string({ error: "must be a string" })
      .min(1, { error: "must not be empty" })
      .max(PASSWORD_MAX, { error: "is not correct" }),
    new_password: passwordSchema,
  })
  .strict();

export const WRONG_CURRENT_PASSWORD = "current_password: is not correct";

/**
 * Guesses at the current password through a stolen session would bypass the sign-in limits, so
 * they have their own: 10 per user in 15 minutes, counted in PostgreSQL (auth_rate_limits).
 */
export const PASSWORD_CHANGE_FAILURES = 10;
const limiterByClient = new WeakMap<postgres.Sql, RateLimiterPostgres>();

function limiter(sql: postgres.Sql): RateLimiterPostgres {
  let made = limiterByClient.get(sql);
  if (!made) {
    made = new RateLimiterPostgres({
      // The store calls `query({ text, values })` and reads `rows` / `rowCount` (node-postgres's shape).
      storeClient: {
        query: async (q: { text: string; values?: unknown[] }) => {
          const rows = await sql.unsafe(q.text, (q.values ?? []) as postgres.ParameterOrJSON<never>[]);
          return { rows, rowCount: rows.count };
        },
      },
      storeType: "pool",
      tableName: "auth_rate_limits",
      tableCreated: true,
      keyPrefix: "password_change",
      points: PASSWORD_CHANGE_FAILURES,
      duration: 15 * 60,
    });
    limiterByClient.set(sql, made);
  }
  return made;
}

/** Takes a point before the check (concurrent guesses cannot slip past); RateLimitedError beyond the limit. */
async function takeAttempt(sql: postgres.Sql, userId: string): Promise<void> {
  try {
    await limiter(sql).consume(userId, 1);
  } catch (err) {
    if (!(err instanceof RateLimiterRes)) throw err;
    const at = new Date(Date.now() + err.msBeforeNext);
    throw new RateLimitedError(`too many wrong current passwords; try again after ${at.toISOString()}`, at);
  }
}

interface PasswordChange {
  userId: string;
  keepSessionId?: string;
  input: z.output<typeof passwordChangeSchema>;
}

/**
 * Changes the user's password after checking the current one, then ends every other browser
 * session (whoever knew the old password may hold one). The session making the change, if any,
 * stays signed in; personal API tokens stay until revoked. Returns how many sessions ended.
 */
export async function changePassword(db: Db, args: PasswordChange): Promise<number> {
  // One admission to the bounded hash queue for both hashes (busy answers at once, nothing changed).
  return withHashAdmission(() => checkAndChange(db, args));
}

async function checkAndChange(db: Db, args: PasswordChange): Promise<number> {
  const { current_password, new_password } = args.input;
  const [row] = await db.select({ passwordHash: users.passwordHash }).from(users).where(eq(users.id, args.userId)).limit(1);
  if (!row) throw new AppError("unauthorized", "sign in again");
  await takeAttempt(driverOf(db), args.userId);
  if (!(await verifyPassword(current_password, row.passwordHash))) throw new AppError("forbidden", WRONG_CURRENT_PASSWORD);
  await limiter(driverOf(db)).delete(args.userId);
  if (new_password === current_password) throw new AppError("validation_failed", "new_password: must differ from the current password");
  const passwordHash = await hashPassword(new_password);
  return db.transaction(async (tx) => {
    // Only over the hash that was verified: of two changes at once, the second must prove the new password.
    const updated = await tx
      .update(users)
      .set({ passwordHash })
      .where(and(eq(users.id, args.userId), eq(users.passwordHash, row.passwordHash)))
      .returning({ id: users.id });
    if (updated.length === 0) throw new AppError("forbidden", WRONG_CURRENT_PASSWORD);
    return endOtherSessions(tx, { userId: args.userId, keepSessionId: args.keepSessionId });
  });
}
