import type { ZodError } from "zod";

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
  worker_unavailable: 503,
  unavailable: 503,
  // A batch or request names a model or tool group this process does not have.
  model_unavailable: 400,
  tool_unavailable: 400,
  quota_exceeded: 429,
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
