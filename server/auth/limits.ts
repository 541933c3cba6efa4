import "server-only";
import type postgres from "postgres";
import { RateLimiterPostgres, RateLimiterRes } from "rate-limiter-flexible";
import { AppError } from "@/server/errors";

/**
 * Sign-in and registration limits, counted in PostgreSQL (table auth_rate_limits) so every web
 * process shares them. rate-limiter-flexible does the counting; its Postgres store gets a
 * two-method adapter over this app's postgres.js pool instead of a second driver.
 *
 * - Sign-in, per email: 10 failed attempts in 15 minutes, then that email cannot sign in (even
 *   with the right password) until the window passes. A success clears the count.
 * - Sign-in, per client address: 100 failed attempts in 15 minutes.
 * - Registration: 30 per client address per hour, 5 per email per hour.
 *
 * Each attempt takes its point before the password is checked, so concurrent guesses cannot
 * slip past the limit between a read and a write.
 */

export const SIGNIN_EMAIL_FAILURES = 10;
export const SIGNIN_WINDOW_SECONDS = 15 * 60;

export class RateLimitedError extends AppError {
  constructor(
    message: string,
    readonly retryAt: Date,
  ) {
    super("rate_limited", message);
  }
  get retryAfterSeconds(): number {
    return Math.max(1, Math.ceil((this.retryAt.getTime() - Date.now()) / 1000));
  }
}

interface Limiters {
  signinEmail: RateLimiterPostgres;
  signinAddress: RateLimiterPostgres;
  registerAddress: RateLimiterPostgres;
  registerEmail: RateLimiterPostgres;
}

const byClient = new WeakMap<postgres.Sql, Limiters>();

function limiters(sql: postgres.Sql): Limiters {
  const cached = byClient.get(sql);
  if (cached) return cached;
  // The store calls `query({ text, values })` and reads `rows` / `rowCount` (node-postgres's shape).
  const storeClient = {
    query: async (q: { text: string; values?: unknown[] }) => {
      const rows = await sql.unsafe(q.text, (q.values ?? []) as postgres.ParameterOrJSON<never>[]);
      return { rows, rowCount: rows.count };
    },
  };
  const make = (keyPrefix: string, points: number, duration: number) =>
    new RateLimiterPostgres({
      storeClient,
      storeType: "pool",
      tableName: "auth_rate_limits",
      tableCreated: true, // drizzle/0003_security.sql
      keyPrefix,
      points,
      duration,
    });
  const made: Limiters = {
    signinEmail: make("signin_email", SIGNIN_EMAIL_FAILURES, SIGNIN_WINDOW_SECONDS),
    signinAddress: make("signin_addr", 100, SIGNIN_WINDOW_SECONDS),
    registerAddress: make("register_addr", 30, 3600),
    registerEmail: make("register_email", 5, 3600),
  };
  byClient.set(sql, made);
  return made;
}

/** Keys stay bounded (the store's key column is varchar(255)) whatever a client sends. */
function emailKey(email: unknown): string {
  return (typeof email === "string" ? email : "").trim().toLowerCase().slice(0, 200);
}

async function take(limiter: RateLimiterPostgres, key: string, message: (at: Date) => string): Promise<void> {
  try {
    await limiter.consume(key, 1);
  } catch (err) {
    if (err instanceof RateLimiterRes) {
      const at = new Date(Date.now() + err.msBeforeNext);
      throw new RateLimitedError(message(at), at);
    }
    throw err;
  }
}

const when = (at: Date) => `try again after ${at.toISOString()}`;

/**
 * Runs `verify` (the password check) under the sign-in limits. RateLimitedError when the email
 * or address is locked out; a success clears the email's count.
 */
export async function limitSignIn<T>(
  sql: postgres.Sql,
  args: { email: unknown; address: string },
  verify: () => Promise<T | null>,
): Promise<T | null> {
  const l = limiters(sql);
  const email = emailKey(args.email);
  await take(l.signinEmail, email, (at) => `too many failed sign-ins for this email; ${when(at)}`);
  await take(l.signinAddress, args.address, (at) => `too many failed sign-ins from this address; ${when(at)}`);
  const user = await verify();
  if (user) await Promise.all([l.signinEmail.delete(email), l.signinAddress.reward(args.address, 1)]);
  return user;
}

/** Takes one registration attempt for this address and email; RateLimitedError beyond the limits. */
export async function limitRegistration(sql: postgres.Sql, args: { email: unknown; address: string }): Promise<void> {
  const l = limiters(sql);
  await take(l.registerAddress, args.address, (at) => `too many registrations from this address; ${when(at)}`);
  await take(l.registerEmail, emailKey(args.email), (at) => `too many registrations for this email; ${when(at)}`);
}
