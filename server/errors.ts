import type { ZodError } from "zod";

/**
 * The one error style. An error has one code (the table below maps it to an HTTP status) and is
 * turned into each surface by one function here: errorBody (an HTTP answer), errorText (a tool
 * result, an item's error, any one-line message) and logError (a log field that keeps the stack,
 * with bound query values scrubbed). Anything that is not an AppError is internal: logged whole,
 * shown as "internal error". Aborts carry an AbortReason with a kind.
 */

/** Typed error codes shared by every layer; one map from code to HTTP status. */
export const ERROR_STATUS = {
  bad_request: 400,
  invalid_json: 400,
  validation_failed: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  // Too much work of one kind in flight at once (password hashing); retry in a moment.
  busy: 429,
  worker_unavailable: 503,
  unavailable: 503,
  // A batch or request names a model or tool group this process does not have.
  model_unavailable: 400,
  tool_unavailable: 400,
  quota_exceeded: 429,
  // A thread already has chat.max_queued_messages messages waiting.
  queue_full: 429,
  // A user's exports in flight at once (results.csv / results.jsonl) reached their limit.
  too_many_exports: 429,
  internal: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export class AppError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = "AppError";
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }
}

export const notFound = (what: string) => new AppError("not_found", `${what} not found`);

/** A zod error as `field: message` (the first issue), the one validation message style. */
export function zodMessage(error: ZodError, prefix = ""): string {
  const issue = error.issues[0];
  const field = [prefix, ...(issue?.path ?? [])].filter((p) => p !== "").join(".");
  return field ? `${field}: ${issue?.message}` : (issue?.message ?? "invalid input");
}

/** An error's one-line text: for a tool result, an item's error column or a message shown. */
export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** The JSON error answer of an HTTP route: `{ error: { code, message } }` with its status (internal errors say no more). */
export function errorBody(err: unknown): { status: number; body: { error: { code: ErrorCode; message: string } } } {
  const e = err instanceof AppError ? err : new AppError("internal", "internal error");
  return { status: e.status, body: { error: { code: e.code, message: e.message } } };
}

function codeOf(err: unknown): string | undefined {
  if (!err || typeof err !== "object" || !("code" in err)) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" ? code : undefined;
}
export { codeOf as errorCodeOf };

/**
 * An error as a log field (pino's `err` serializer): type, code, message and stack, causes
 * included. drizzle's "Failed query: … params: …" message and postgres.js's `parameters` /
 * `query` fields would otherwise put whatever was bound (password hashes, prompts, tokens)
 * into the logs, so bound values are scrubbed. Log errors as `{ err }`, never `err.message`.
 */
export function logError(err: unknown, depth = 0): Record<string, unknown> | unknown {
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
  if (e.cause !== undefined && e.cause !== err) out.cause = logError(e.cause, depth + 1);
  return out;
}

/**
 * Why a run or an item was aborted. One class (named AbortError, as fetch and the AI SDK
 * expect of an abort) whose kind says why: stopped by a person or the caller, its time limit,
 * the worker lost the item's lease, or the worker is shutting down.
 */
export type AbortKind = "stopped" | "timeout" | "lease_lost" | "shutdown";

export class AbortReason extends Error {
  constructor(
    readonly kind: AbortKind,
    message: string,
  ) {
    super(message);
    this.name = "AbortError";
  }
}

/** The kind of an abort signal's reason (undefined when it was aborted some other way, or not at all). */
export function abortKind(reason: unknown): AbortKind | undefined {
  return reason instanceof AbortReason ? reason.kind : undefined;
}
