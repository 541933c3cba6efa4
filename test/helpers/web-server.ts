import http from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { pipeToNodeResponse } from "next/dist/server/pipe-readable";
import { createFrontDoorServer, type FrontDoorOptions } from "@/server/http/front-door";
import { dispatch, preloadRoutes } from "./app-routes";

/**
 * A real HTTP server for tests: node:http on a loopback port, behind the production front door
 * (client address, slow bodies), in front of every route handler under app/ (test/helpers/
 * app-routes.ts), with request and response bodies streamed both ways. The handlers use
 * getDatabase(), so point DATABASE_URL at the suite's database first (setupApiDatabase does).
 * Clients may connect from any 127.0.0.x address (`send(..., { from })`) to be distinct peers.
 */

export interface WebServer {
  origin: string;
  port: number;
  close: () => Promise<void>;
}

export interface WebServerOptions extends FrontDoorOptions {
  port?: number;
  /** Route pages to load before listening (see preloadRoutes); the rest load on first request. */
  preload?: string[];
}

function toRequest(req: http.IncomingMessage, origin: string, signal: AbortSignal): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, value);
  }
  const init: RequestInit & { duplex?: "half" } = { method: req.method, headers, signal };
  if (req.method !== "GET" && req.method !== "HEAD") {
    init.body = Readable.toWeb(req) as ReadableStream<Uint8Array>;
    init.duplex = "half";
  }
  return new Request(new URL(req.url ?? "/", origin), init);
}

async function serve(req: http.IncomingMessage, res: http.ServerResponse, origin: string): Promise<void> {
  const controller = new AbortController();
  res.on("close", () => controller.abort());
  const response = await dispatch(toRequest(req, origin, controller.signal));
  if (res.headersSent || res.destroyed) return; // the front door answered (408) meanwhile
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of response.headers) if (name !== "set-cookie") headers[name] = value;
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) headers["set-cookie"] = cookies;
  res.writeHead(response.status, headers);
  if (!response.body || req.method === "HEAD") {
    res.end();
    return;
  }
  // Streamed as Next streams a route handler's body (its own pipeToNodeResponse): a body that
  // errors aborts the response, but only once the write in flight has drained, as in production.
  await pipeToNodeResponse(response.body, res);
}

export async function startWebServer(options: WebServerOptions = {}): Promise<WebServer> {
  if (options.preload) await preloadRoutes(options.preload);
  let origin = "";
  const server = createFrontDoorServer((req, res) => {
    serve(req, res, origin).catch((err) => {
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" }).end(String(err));
      else res.destroy();
    });
  }, options);
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  origin = `http://127.0.0.1:${port}`;
  return {
    origin,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface SendOptions {
  method?: string;
  headers?: Record<string, string>;
  /** Sent whole; JSON-encoded with content-type application/json when `json` is given instead. */
  body?: string | Buffer;
  json?: unknown;
  /** The local (source) address of the client socket, e.g. 127.0.0.2. */
  from?: string;
  timeoutMs?: number;
}

export interface SentResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request over a fresh connection from `from` (default 127.0.0.1). */
export function send(server: Pick<WebServer, "port">, path: string, options: SendOptions = {}): Promise<SentResponse> {
  const headers: Record<string, string> = { ...options.headers };
  let body = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers["content-type"] ??= "application/json";
  }
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: "127.0.0.1",
        port: server.port,
        path,
        method: options.method ?? (body === undefined ? "GET" : "POST"),
        headers,
        localAddress: options.from,
        agent: false,
        timeout: options.timeoutMs ?? 30_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`no answer from ${path} within ${options.timeoutMs ?? 30_000} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}
