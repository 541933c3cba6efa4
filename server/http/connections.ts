import { randomUUID } from "node:crypto";
import type http from "node:http";
import type net from "node:net";

/**
 * A response a route cuts must close its connection. Next streams a route's body with a write
 * that waits for the socket to drain, and only aborts the response once that write settles: for
 * a client that stopped reading, never, so the connection would stay open with megabytes queued.
 * The front door, which sees the socket, files each request's connection under a random key in
 * CONNECTION_HEADER (replacing anything a client sent under that name); a route passes the key
 * on, and cutConnection destroys that socket. The registry lives on globalThis because the
 * front door (scripts/web.ts) and the route handlers (Next's bundle) load this module apart.
 * Plain Node, no server-only: a script loads it.
 */
export const CONNECTION_HEADER = "x-flotilla-connection";

const shared = globalThis as unknown as { __flotillaConnections?: Map<string, http.ServerResponse> };
shared.__flotillaConnections ??= new Map();
const registry = shared.__flotillaConnections;

/** Files the request's connection under a fresh key in its CONNECTION_HEADER until the response closes. */
export function fileConnection(req: http.IncomingMessage, res: http.ServerResponse): void {
  const key = randomUUID();
  req.headers[CONNECTION_HEADER] = key;
  registry.set(key, res);
  res.once("close", () => registry.delete(key));
}

/** The key of a request's connection, as a route handler reads it (null behind no front door). */
export function connectionKey(req: Request): string | null {
  return req.headers.get(CONNECTION_HEADER);
}

/** Resets the connection filed under `key` (nothing if it is gone already). */
export function cutConnection(key: string | null | undefined): void {
  if (!key) return;
  const res = registry.get(key);
  registry.delete(key);
  if (res?.socket) resetConnection(res.socket);
  res?.destroy();
}

/**
 * Ends a cut response's connection with a TCP reset. A plain destroy closes gracefully: the
 * kernel keeps every byte still queued for a client that does not read, and the FIN behind
 * them, for minutes (FIN-WAIT-1, megabytes a connection); a reset drops them at once and tells
 * the client the response was cut (ECONNRESET), never that it ended.
 */
export function resetConnection(socket: net.Socket): void {
  if (socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    // Not a TCP socket (no reset to send): close it as before.
    socket.destroy();
  }
}
