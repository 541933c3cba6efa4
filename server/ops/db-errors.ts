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

function codeOf(err: unknown): string | undefined {
  if (!err || typeof err !== "object" || !("code" in err)) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}

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

/**
 * An error as it may be logged: type, code, and a message without bound parameters. drizzle's
 * "Failed query: … params: …" message and postgres.js's `parameters` / `query` fields would
 * otherwise put whatever was bound (password hashes, prompts, tokens) into the logs.
 */
export function redactError(err: unknown, depth = 0): Record<string, unknown> | unknown {
  if (!err || typeof err !== "object" || depth > 3) return err;
  const e = err as { name?: unknown; message?: unknown; code?: unknown; stack?: unknown; cause?: unknown };
  const code = codeOf(err);
  // SQLSTATE classes 22 (data exception) and 23 (integrity) quote the offending value.
  const quotesValue = code !== undefined && /^2[23][0-9A-Z]{3}$/.test(code);
  const scrub = (text: string) => {
    const unbound = text.replace(/\nparams: [\s\S]*?(?=\n\s+at |$)/, "");
    return quotesValue ? unbound.replace(/"[^"\n]*"/g, '"[redacted]"').replace(/=\([^\n]*\)/g, "=([redacted])") : unbound;
  };
  const message = typeof e.message === "string" ? scrub(e.message) : undefined;
  const out: Record<string, unknown> = { type: typeof e.name === "string" ? e.name : "Error", message };
  if (code) out.code = code;
  if (typeof e.stack === "string") out.stack = scrub(e.stack);
  if (e.cause !== undefined && e.cause !== err) out.cause = redactError(e.cause, depth + 1);
  return out;
}
