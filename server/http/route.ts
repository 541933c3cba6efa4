import "server-only";
import { ZodError, type z } from "zod";
import { AppError, errorBody, zodMessage } from "@/server/errors";
import { log } from "@/server/log";

/** Standard Web Request/Response helpers for route handlers; no Next.js imports so tests can call handlers directly. */

export function json(body: unknown, status = 200, headers?: HeadersInit): Response {
  return Response.json(body, { status, headers });
}

export function errorResponse(error: AppError): Response {
  // A rate limit that knows when it lifts says so (server/auth/limits.ts).
  const retryAfter = (error as { retryAfterSeconds?: unknown }).retryAfterSeconds;
  const headers = typeof retryAfter === "number" ? { "retry-after": String(retryAfter) } : undefined;
  const { status, body } = errorBody(error);
  return json(body, status, headers);
}

/** Wraps a handler: AppError → its status, ZodError → 400 naming the field, anything else → logged 500. */
export function handle<Ctx>(fn: (req: Request, ctx: Ctx) => Promise<Response>) {
  return async (req: Request, ctx: Ctx): Promise<Response> => {
    try {
      return await fn(req, ctx);
    } catch (err) {
      if (err instanceof AppError) return errorResponse(err);
      if (err instanceof ZodError) return errorResponse(new AppError("validation_failed", zodMessage(err)));
      log.error({ err, method: req.method, url: req.url }, "unhandled route error");
      return errorResponse(new AppError("internal", "internal error"));
    }
  };
}

/** Reads the body as text without buffering more than `maxBytes` (413 beyond it). */
export async function readBodyText(req: Request, maxBytes: number): Promise<string> {
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > maxBytes)
    throw new AppError("payload_too_large", `request body exceeds ${maxBytes} bytes`);
  if (!req.body) return "";
  const reader = req.body.getReader();
  const decoder = new TextDecoder();
  let size = 0;
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      throw new AppError("payload_too_large", `request body exceeds ${maxBytes} bytes`);
    }
    text += decoder.decode(value, { stream: true });
  }
  return text + decoder.decode();
}

/** Parses a JSON body against a schema: 413 when too large, 400 invalid_json, 400 naming the first bad field. */
export async function readJson<S extends z.ZodType>(req: Request, schema: S, maxBytes: number): Promise<z.output<S>> {
  const text = await readBodyText(req, maxBytes);
  let value: unknown;
  try {
    value = text.trim() === "" ? {} : JSON.parse(text);
  } catch {
    throw new AppError("invalid_json", "request body is not valid JSON");
  }
  return validated(schema, value);
}

/** A body against its schema: 400 naming the first bad field. */
export function validated<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new AppError("validation_failed", zodMessage(parsed.error));
  return parsed.data;
}

/** Validates path/query parameters; a malformed id is a 404 (it cannot name anything of yours). */
export function parseParam<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new AppError("not_found", `${what} not found`);
  return parsed.data;
}
