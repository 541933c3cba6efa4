import type { z } from "zod";

/**
 * The browser's one way to call the API: every response body is parsed with a `lib/api/`
 * projection schema, and a non-2xx answer throws an ApiError carrying the server's own
 * message and code.
 */

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** Sends a request and returns the parsed JSON body (null when empty); throws ApiError on non-2xx. */
export async function request(path: string, init?: RequestInit): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(path, { credentials: "same-origin", cache: "no-store", ...init });
  } catch (err) {
    if ((err as Error).name === "AbortError") throw err;
    throw new ApiError("The server could not be reached. Check your connection and try again.", 0, "network");
  }
  const text = await res.text();
  let body: unknown = null;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
  }
  if (!res.ok) {
    const error = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    const message = typeof error?.message === "string" ? error.message : `Request failed (HTTP ${res.status})`;
    throw new ApiError(message, res.status, typeof error?.code === "string" ? error.code : `http_${res.status}`);
  }
  return body;
}

export function parse<S extends z.ZodType>(schema: S, body: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(body);
  if (!parsed.success) throw new ApiError(`The server sent an unexpected ${what}.`, 200, "bad_response");
  return parsed.data;
}

/** `request` + `parse`: the typed result of one call. */
export async function fetchJson<S extends z.ZodType>(
  schema: S,
  path: string,
  what: string,
  init?: RequestInit,
): Promise<z.output<S>> {
  return parse(schema, await request(path, init), what);
}

/** A JSON POST (or another method via init) answered with a schema-checked body. */
export async function sendJson<S extends z.ZodType>(
  schema: S,
  path: string,
  what: string,
  body?: unknown,
  init?: RequestInit,
): Promise<z.output<S>> {
  return fetchJson(schema, path, what, {
    method: "POST",
    headers: body === undefined ? undefined : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    ...init,
  });
}
