import "server-only";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { presentedToken, userIdForToken } from "@/server/auth/tokens";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { AppError, errorBody } from "@/server/errors";
import { json } from "@/server/http/route";
import { createMcpServer } from "./tools";

/**
 * /mcp: the Model Context Protocol over Streamable HTTP, stateless. Every POST gets its own
 * server and transport (no session, nothing kept in this process), so any web process can answer
 * any request; answers are JSON, not an SSE stream, and nothing is pushed between requests, so
 * GET (the server-to-client stream) and DELETE (ending a session) answer 405.
 *
 * Only a personal API token authenticates: a browser's session cookie is never enough, so a page
 * elsewhere (or a DNS-rebound host) cannot call the tools with a visitor's session.
 */

const UNAUTHORIZED = new AppError("unauthorized", "send a personal API token as Authorization: Bearer <token>");

/** The caller's user id, or the 401 answer (with the challenge MCP clients read). */
async function caller(req: Request): Promise<string | Response> {
  const token = presentedToken(req);
  const userId = token ? await userIdForToken(getDatabase().db, token) : null;
  if (userId) return userId;
  const { status, body } = errorBody(UNAUTHORIZED);
  return json(body, status, { "www-authenticate": 'Bearer realm="flotilla"' });
}

export async function serveMcp(req: Request): Promise<Response> {
  const userId = await caller(req);
  if (userId instanceof Response) return userId;
  const config = getConfig();
  const server = createMcpServer({ db: getDatabase().db, config, userId });
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
    // A submission arrives whole in the request, bounded as the JSON door bounds its body.
    maxRequestBodySize: config.http.max_body_bytes,
  });
  await server.connect(transport);
  try {
    // With JSON answers this settles once every request in the message has been answered.
    return await transport.handleRequest(req);
  } finally {
    await server.close();
  }
}

/** GET and DELETE: a stateless server has no stream to open and no session to end. */
export async function refuseMcpMethod(req: Request): Promise<Response> {
  const userId = await caller(req);
  if (userId instanceof Response) return userId;
  return json(
    { error: { code: "method_not_allowed", message: `${req.method} is not served: /mcp is stateless; send each message as a POST` } },
    405,
    { allow: "POST" },
  );
}
