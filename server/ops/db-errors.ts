import { errorCodeOf as codeOf } from "@/server/errors";

/**
 * Is this error the database being unreachable (restart, failover, dropped connection) rather
 * than a problem with the work itself? Such a failure says nothing about the item: the worker
 * hands the item back (attempt refunded) instead of counting a failed attempt.
 */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  // postgres.js
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
]);

export function isDatabaseUnavailable(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== "object" || depth > 5) return false;
  const code = codeOf(err);
  if (code) {
    if (NETWORK_CODES.has(code)) return true;
    // SQLSTATE class 08 (connection exception), 57P01..57P03 (admin/crash shutdown, cannot connect now).
    if (/^08[0-9A-Z]{3}$/.test(code) || /^57P0[1-3]$/.test(code)) return true;
  }
  // drizzle wraps driver errors (DrizzleQueryError) with the driver's error as `cause`.
  const cause = (err as { cause?: unknown }).cause;
  if (cause !== undefined && cause !== err) return isDatabaseUnavailable(cause, depth + 1);
  // AggregateError from connecting to several addresses.
  const errors = (err as { errors?: unknown }).errors;
  if (Array.isArray(errors)) return errors.some((e) => isDatabaseUnavailable(e, depth + 1));
  return false;
}
