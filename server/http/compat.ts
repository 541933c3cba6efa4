import "server-only";
import { ZodError } from "zod";
import { userIdForToken } from "@/server/auth/tokens";
import { getDatabase } from "@/server/db/client";
import type { CompatApi } from "@/server/db/schema/compat";
import { AppError, notFound, zodMessage } from "@/server/errors";
import { log } from "@/server/log";
import { contentDisposition } from "@/server/http/download";
import { CompatParamError } from "@/server/compat/errors";
import { expireCompatBatches } from "@/server/compat/expiry";
import { parseAnthropicBatchId, parseOpenAiBatchId } from "@/server/compat/ids";
import type { Db } from "@/server/db/client";

/**
 * Route plumbing of the compatible APIs: the personal API token as the key, and errors in each
 * provider's own shape, so the SDKs raise their typed errors (NotFoundError, BadRequestError …):
 *   OpenAI     { error: { message, type, param, code } }
 *   Anthropic  { type: "error", error: { type, message } }
 */

/** The caller of a compatible route: `Authorization: Bearer <token>` or `x-api-key: <token>`. */
export async function requireApiKey(req: Request): Promise<{ userId: string }> {
  const authorization = req.headers.get("authorization");
  const bearer = authorization ? /^Bearer\s+(\S+)\s*$/i.exec(authorization)?.[1] : undefined;
  const key = bearer ?? req.headers.get("x-api-key")?.trim();
  const userId = key ? await userIdForToken(getDatabase().db, key) : null;
  if (!userId)
    throw new AppError(
      "unauthorized",
      key ? "invalid API key (a personal API token of this deployment)" : "send a personal API token as Authorization: Bearer <token> or x-api-key",
    );
  return { userId };
}


const OPENAI_TYPES: Partial<Record<AppError["code"], string>> = {
  unauthorized: "invalid_request_error",
  not_found: "invalid_request_error",
  rate_limited: "rate_limit_error",
  quota_exceeded: "rate_limit_error",
  internal: "server_error",
  unavailable: "server_error",
  worker_unavailable: "server_error",
};
const OPENAI_CODES: Partial<Record<AppError["code"], string>> = { unauthorized: "invalid_api_key" };

const ANTHROPIC_TYPES: Partial<Record<AppError["code"], string>> = {
  unauthorized: "authentication_error",
  forbidden: "permission_error",
  not_found: "not_found_error",
  payload_too_large: "request_too_large",
  rate_limited: "rate_limit_error",
  quota_exceeded: "rate_limit_error",
  internal: "api_error",
  unavailable: "api_error",
  worker_unavailable: "api_error",
};

export function compatErrorResponse(api: CompatApi, err: AppError): Response {
  if (api === "openai")
    return Response.json(
      {
        error: {
          message: err.message,
          type: OPENAI_TYPES[err.code] ?? "invalid_request_error",
          param: err instanceof CompatParamError ? err.param : null,
          code: OPENAI_CODES[err.code] ?? err.code,
        },
      },
      { status: err.status },
    );
  return Response.json(
    { type: "error", error: { type: ANTHROPIC_TYPES[err.code] ?? "invalid_request_error", message: err.message } },
    { status: err.status },
  );
}

/** Wraps a compatible route: AppError and ZodError in the provider's shape, anything else a logged 500. */
export function compatHandle<Ctx>(api: CompatApi, fn: (req: Request, ctx: Ctx) => Promise<Response>) {
  return async (req: Request, ctx: Ctx): Promise<Response> => {
    try {
      return await fn(req, ctx);
    } catch (err) {
      if (err instanceof AppError) return compatErrorResponse(api, err);
      if (err instanceof ZodError) return compatErrorResponse(api, new AppError("validation_failed", zodMessage(err)));
      log.error({ err, method: req.method, url: req.url }, "unhandled compat route error");
      return compatErrorResponse(api, new AppError("internal", "internal error"));
    }
  };
}

/** A JSONL body streamed to the client. */
export function jsonlResponse(body: ReadableStream<Uint8Array>, filename: string): Response {
  return new Response(body, {
    status: 200,
    headers: {
      "content-type": "application/jsonl; charset=utf-8",
      "content-disposition": contentDisposition(filename),
      "cache-control": "no-store",
      "x-content-type-options": "nosniff",
    },
  });
}

/** A whole-number query parameter within bounds (400 naming it otherwise). */
export function queryInt(url: URL, name: string, bounds: { min: number; max: number; fallback: number }): number {
  const raw = url.searchParams.get(name);
  if (raw === null || raw === "") return bounds.fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < bounds.min || n > bounds.max)
    throw new CompatParamError(name, `${name}: must be a whole number between ${bounds.min} and ${bounds.max}`);
  return n;
}

/** This deployment as the client reached it (behind a proxy: its forwarded host and scheme). */
export function requestOrigin(req: Request): string {
  const url = new URL(req.url);
  const host = req.headers.get("x-forwarded-host")?.split(",")[0]?.trim() || req.headers.get("host") || url.host;
  const proto = req.headers.get("x-forwarded-proto")?.split(",")[0]?.trim() || url.protocol.replace(/:$/, "");
  return `${proto}://${host}`;
}

/** What a route on one compatible batch gets: the caller, the batch's own id, the database. */
export interface CompatBatchCall {
  req: Request;
  userId: string;
  id: string;
  db: Db;
}

/**
 * A route on one batch of a compatible API: the API key, the provider's batch id parsed (404
 * when it names nothing of this deployment), the batch's completion window enforced before the
 * route reads it, errors in the provider's shape.
 */
export function compatBatchRoute(api: CompatApi, fn: (call: CompatBatchCall) => Promise<Response>) {
  return compatHandle(api, async (req: Request, ctx: { params: Promise<{ batchId: string }> }) => {
    const { userId } = await requireApiKey(req);
    const id = (api === "openai" ? parseOpenAiBatchId : parseAnthropicBatchId)((await ctx.params).batchId);
    if (!id) throw notFound("batch");
    const db = getDatabase().db;
    await expireCompatBatches(db, { userId, api, id });
    return fn({ req, userId, id, db });
  });
}
