import http from "node:http";
import { type Span, SpanStatusCode } from "@opentelemetry/api";
import { inSpan, SpanKind, startSpan } from "../telemetry";
import { fileConnection, resetConnection } from "./connections";
import { CLIENT_ADDRESS_HEADER, isTrusted, normalizeAddress, resolveClientAddress, trustedProxyList } from "../net/client-address";

/**
 * The socket-level policy in front of the web process (scripts/web.ts) and of the tests' real
 * HTTP server (test/helpers/web-server.ts): it decides each request's client address, cuts
 * request bodies that arrive too slowly and responses the client stopped reading, and files each
 * connection for a route to cut. Plain Node, no server-only: a script loads it.
 */

/** A body slower than this over the window is answered 408 and its connection closed. */
export const SLOW_BODY = { windowMs: 30_000, minBytesPerSecond: 1024 };

/**
 * A response with bytes queued for a client that took none of them for this long loses its
 * connection (reset: connections.ts). Next waits for every write of a streamed body to drain, so without this a download
 * (compare.csv, a file, an export) whose client never reads holds its socket, its queued bytes
 * and the stream behind them for ever. A response that is only quiet (a chat stream between
 * chunks) has nothing queued and is never cut.
 */
export const STALLED_READER_MS = 30_000;

export interface FrontDoorOptions {
  /** CIDRs (or single addresses) whose X-Forwarded-For is believed (`http.trusted_proxies`). */
  trustedProxies?: readonly string[];
  /** Tests only: a shorter window. */
  slowBody?: { windowMs: number; minBytesPerSecond: number };
  /** Tests only: a shorter STALLED_READER_MS. */
  stalledReaderMs?: number;
}

/** A request handler; when it returns a promise, the request's span lasts until it settles too. */
type Listener = (req: http.IncomingMessage, res: http.ServerResponse) => void | Promise<void>;

interface Upload {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  /** socket.bytesRead once per tick, oldest first, at most one window long. */
  samples: number[];
}

const SLOW_BODY_ERROR = JSON.stringify({
  error: { code: "request_timeout", message: "request body arrived slower than 1 KiB/s over 30 s" },
});

function hasBody(req: http.IncomingMessage): boolean {
  return req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0;
}

export interface FrontDoor extends Listener {
  /** Stops the slow-body clock (the server's close does it). */
  stop(): void;
}

/** Wraps a request listener with the client-address and slow-body policies. */
export function frontDoor(handler: Listener, options: FrontDoorOptions = {}): FrontDoor {
  const trusted = trustedProxyList(options.trustedProxies ?? []);
  const { windowMs, minBytesPerSecond } = options.slowBody ?? SLOW_BODY;
  const windowTicks = 30;
  const tickMs = windowMs / windowTicks;
  const minBytesPerWindow = (minBytesPerSecond * windowMs) / 1000;
  const stalledReaderMs = options.stalledReaderMs ?? STALLED_READER_MS;
  const uploads = new Set<Upload>();
  let clock: NodeJS.Timeout | undefined;

  const cut = ({ res }: Upload) => {
    const socket = res.socket;
    if (res.headersSent || !socket) {
      socket?.destroy();
      return;
    }
    res.writeHead(408, { "content-type": "application/json", connection: "close" });
    res.end(SLOW_BODY_ERROR, () => socket.destroy());
    // The handler may still be waiting for the body: whatever it writes later goes nowhere.
    setTimeout(() => socket.destroy(), 1_000).unref();
  };

  const tick = () => {
    for (const upload of uploads) {
      const { req, samples } = upload;
      const socket = req.socket;
      if (req.complete || socket.destroyed) {
        uploads.delete(upload);
        continue;
      }
      // Bytes waiting for the handler: the server is behind, not the client; its window restarts.
      if (req.readableLength >= req.readableHighWaterMark || socket.isPaused()) {
        samples.length = 0;
        samples.push(socket.bytesRead);
        continue;
      }
      samples.push(socket.bytesRead);
      if (samples.length <= windowTicks) continue;
      samples.shift();
      if (socket.bytesRead - samples[0]! < minBytesPerWindow) {
        uploads.delete(upload);
        cut(upload);
      }
    }
    if (uploads.size === 0 && clock) {
      clearInterval(clock);
      clock = undefined;
    }
  };

  const door = ((req, res) => {
    const peer = req.socket.remoteAddress;
    const forwarded = req.headers["x-forwarded-for"];
    req.headers[CLIENT_ADDRESS_HEADER] = resolveClientAddress(peer, Array.isArray(forwarded) ? forwarded.join(",") : forwarded, trusted);
    // What an untrusted client claims goes no further; Next then records the peer itself.
    if (!peer || !isTrusted(trusted, normalizeAddress(peer))) delete req.headers["x-forwarded-for"];
    // So a route that cuts its response can close the connection (server/http/connections.ts).
    fileConnection(req, res);
    // The socket's idle timer: a write the client drains, or any byte it sends, restarts it.
    res.setTimeout(stalledReaderMs, () => {
      if (res.socket && res.socket.writableLength > 0) resetConnection(res.socket);
    });
    if (hasBody(req)) {
      uploads.add({ req, res, samples: [req.socket.bytesRead] });
      clock ??= setInterval(tick, tickMs).unref();
    }
    // One SERVER span per request, the route handler's spans its children (a no-op while tracing is off).
    const span = startSpan(req.method ?? "HTTP", { "http.request.method": req.method, "url.path": (req.url ?? "/").split("?")[0] }, SpanKind.SERVER);
    const closed = new Promise<void>((resolve) => res.once("close", resolve));
    // Ended once the response has closed and the handler has settled: Next sets `http.route` on
    // this span when its handling settles, after a streamed body's close (ending the span at the
    // close alone made that an "operation on ended Span", twice a chat turn). A handler that
    // throws still ends it, and its rejection goes on as before.
    const handled = inSpan(span, () => handler(req, res));
    void Promise.resolve(handled)
      .then(() => closed)
      .finally(() => endServerSpan(span, res));
  }) as FrontDoor;
  door.stop = () => {
    if (clock) clearInterval(clock);
    clock = undefined;
    uploads.clear();
  };
  return door;
}

function endServerSpan(span: Span, res: http.ServerResponse): void {
  span.setAttribute("http.response.status_code", res.statusCode);
  if (res.statusCode >= 500) span.setAttributes({ "error.type": String(res.statusCode) }).setStatus({ code: SpanStatusCode.ERROR });
  else if (!res.writableFinished) span.setAttribute("error.type", "connection_closed");
  span.end();
}

/**
 * A node:http server behind the front door. Node's own request timeout (300 s for the whole
 * request) is off, so a long upload that keeps pace is never cut; the head still has 30 s.
 */
export function createFrontDoorServer(handler: Listener, options: FrontDoorOptions = {}): http.Server {
  const door = frontDoor(handler, options);
  const server = http.createServer({ requestTimeout: 0, headersTimeout: 30_000, connectionsCheckingInterval: 5_000 }, door);
  server.on("close", () => door.stop());
  return server;
}
