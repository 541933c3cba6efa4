import "server-only";
import type postgres from "postgres";
import { RateLimiterPostgres, RateLimiterRes } from "rate-limiter-flexible";
import { storableText } from "@/server/db/storable";
import { AppError } from "@/server/errors";

/**
 * Sign-in and registration limits, counted in PostgreSQL (table auth_rate_limits) so every web
 * process shares them. rate-limiter-flexible does the counting; its Postgres store gets a
 * two-method adapter over this app's postgres.js pool instead of a second driver.
 *
 * - Sign-in, per client address: 100 failed attempts in 15 minutes lock that address.
 * - Sign-in, per email (smart lockout): 10 failed attempts in 15 minutes lock that email for
 *   every address that has not signed in as that user in the last 30 days. A familiar address
 *   (table familiar_addresses) has its own count of 10 for that email, so a stranger's guesses
 *   never lock the owner out of their usual address, and the owner's typos never help a stranger.
 * - Registration: 30 per client address per hour, 5 per email per hour.
 *
 * Each attempt takes its points before the password is checked, so concurrent guesses cannot
 * slip past a limit between a read and a write. A success gives back only the points it took
 * itself: it never lowers the count its failures built up (alternating stays counted).
 */

export const SIGNIN_EMAIL_FAILURES = 10;
export const SIGNIN_ADDRESS_FAILURES = 100;
export const SIGNIN_WINDOW_SECONDS = 15 * 60;
export const FAMILIAR_DAYS = 30;

/** What a sign-in lock covers: this address, this email from unfamiliar addresses, or this email from this familiar address. */
export type LockScope = "address" | "email" | "email_here";

export class RateLimitedError extends AppError {
  constructor(
    message: string,
    readonly retryAt: Date,
    readonly scope?: LockScope,
  ) {
    super("rate_limited", message);
  }
  get retryAfterSeconds(): number {
    return Math.max(1, Math.ceil((this.retryAt.getTime() - Date.now()) / 1000));
  }
}

interface Limiters {
  signinEmail: RateLimiterPostgres;
  signinEmailFamiliar: RateLimiterPostgres;
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
    signinEmailFamiliar: make("signin_known", SIGNIN_EMAIL_FAILURES, SIGNIN_WINDOW_SECONDS),
    signinAddress: make("signin_addr", SIGNIN_ADDRESS_FAILURES, SIGNIN_WINDOW_SECONDS),
    registerAddress: make("register_addr", 30, 3600),
    registerEmail: make("register_email", 5, 3600),
  };
  byClient.set(sql, made);
  return made;
}

/** Keys stay bounded (the store's key column is varchar(255)) whatever a client sends. */
function emailKey(email: unknown): string {
  // Any text a person types is storable: a NUL in an email is counted under U+FFFD, never a database error.
  return storableText((typeof email === "string" ? email : "").trim().toLowerCase().slice(0, 200));
}

async function take(limiter: RateLimiterPostgres, key: string, message: (at: Date) => string, scope?: LockScope): Promise<void> {
  try {
    await limiter.consume(key, 1);
  } catch (err) {
    if (err instanceof RateLimiterRes) {
      const at = new Date(Date.now() + err.msBeforeNext);
      throw new RateLimitedError(message(at), at, scope);
    }
    throw err;
  }
}

const when = (at: Date) => `try again after ${at.toISOString()}`;

/** Whether `address` signed in successfully as the user with this email in the last FAMILIAR_DAYS. */
async function isFamiliar(sql: postgres.Sql, email: string, address: string): Promise<boolean> {
  const rows = await sql`
    select 1 from familiar_addresses f join users u on u.id = f.user_id
    where u.email = ${email} and f.address = ${address}
      and f.last_signed_in_at > now() - make_interval(days => ${FAMILIAR_DAYS})`;
  return rows.length > 0;
}

/** Remembers a successful sign-in's address; forgets this user's addresses not used for FAMILIAR_DAYS. */
async function rememberAddress(sql: postgres.Sql, userId: string, address: string): Promise<void> {
  await sql`
    insert into familiar_addresses (user_id, address) values (${userId}, ${address})
    on conflict (user_id, address) do update set last_signed_in_at = now()`;
  await sql`
    delete from familiar_addresses
    where user_id = ${userId} and last_signed_in_at < now() - make_interval(days => ${FAMILIAR_DAYS})`;
}

/**
 * Runs `verify` (the password check) under the sign-in limits. RateLimitedError when the address,
 * or the email from this address, is locked out. A success records the address as familiar.
 */
export async function limitSignIn<T extends { id: string }>(
  sql: postgres.Sql,
  args: { email: unknown; address: string },
  verify: () => Promise<T | null>,
): Promise<T | null> {
  const l = limiters(sql);
  const email = emailKey(args.email);
  const address = args.address;
  await take(l.signinAddress, address, (at) => `too many failed sign-ins from this address; ${when(at)}`, "address");
  const familiar = email !== "" && (await isFamiliar(sql, email, address));
  const [emailLimiter, emailKeyed] = familiar ? [l.signinEmailFamiliar, `${address}|${email}`.slice(0, 230)] : [l.signinEmail, email];
  await take(
    emailLimiter,
    emailKeyed,
    (at) =>
      familiar
        ? `too many failed sign-ins for this email from this address; ${when(at)}`
        : `too many failed sign-ins for this email from addresses it has not signed in from recently; ${when(at)}`,
    familiar ? "email_here" : "email",
  );
  const user = await verify();
  if (user) {
    await Promise.all([l.signinAddress.reward(address, 1), emailLimiter.reward(emailKeyed, 1), rememberAddress(sql, user.id, address)]);
  }
  return user;
}

/** Takes one registration attempt for this address and email; RateLimitedError beyond the limits. */
export async function limitRegistration(sql: postgres.Sql, args: { email: unknown; address: string }): Promise<void> {
  const l = limiters(sql);
  await take(l.registerAddress, args.address, (at) => `too many registrations from this address; ${when(at)}`);
  await take(l.registerEmail, emailKey(args.email), (at) => `too many registrations for this email; ${when(at)}`);
}
