import http from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import * as batchCancel from "@/app/v1/batches/[batchId]/cancel/route";
import * as batch from "@/app/v1/batches/[batchId]/route";
import * as batches from "@/app/v1/batches/route";
import * as fileContent from "@/app/v1/files/[fileId]/content/route";
import * as file from "@/app/v1/files/[fileId]/route";
import * as files from "@/app/v1/files/route";
import * as msgCancel from "@/app/v1/messages/batches/[batchId]/cancel/route";
import * as msgResults from "@/app/v1/messages/batches/[batchId]/results/route";
import * as msgBatch from "@/app/v1/messages/batches/[batchId]/route";
import * as msgBatches from "@/app/v1/messages/batches/route";

/**
 * A real HTTP server (node:http on a loopback port) in front of the /v1 route handler modules,
 * routing as Next's app router does, with request and response bodies streamed both ways. The
 * SDKs need a socket; `next start` would serve the same handlers. Run as a script
 * (`tsx --conditions=react-server test/compat/http-server.ts <port>`, so the route modules'
 * `import "server-only"` resolves to its empty module) it is the web process of bench/compat.bench.ts.
 */

type Handler = (req: Request, ctx: { params: Promise<Record<string, string>> }) => Promise<Response>;
type Methods = Partial<Record<"GET" | "POST" | "DELETE", unknown>>;

const seg = "([^/]+)";
const routes: { pattern: RegExp; names: string[]; module: Methods }[] = [
  { pattern: /^\/v1\/files$/, names: [], module: files },
  { pattern: new RegExp(`^/v1/files/${seg}$`), names: ["fileId"], module: file },
  { pattern: new RegExp(`^/v1/files/${seg}/content$`), names: ["fileId"], module: fileContent },
  { pattern: /^\/v1\/batches$/, names: [], module: batches },
  { pattern: new RegExp(`^/v1/batches/${seg}$`), names: ["batchId"], module: batch },
  { pattern: new RegExp(`^/v1/batches/${seg}/cancel$`), names: ["batchId"], module: batchCancel },
  { pattern: /^\/v1\/messages\/batches$/, names: [], module: msgBatches },
  { pattern: new RegExp(`^/v1/messages/batches/${seg}$`), names: ["batchId"], module: msgBatch },
  { pattern: new RegExp(`^/v1/messages/batches/${seg}/cancel$`), names: ["batchId"], module: msgCancel },
  { pattern: new RegExp(`^/v1/messages/batches/${seg}/results$`), names: ["batchId"], module: msgResults },
];

async function dispatch(req: http.IncomingMessage, res: http.ServerResponse, origin: string): Promise<void> {
  const url = new URL(req.url ?? "/", origin);
  for (const route of routes) {
    const match = route.pattern.exec(url.pathname);
    if (!match) continue;
    const handler = route.module[(req.method ?? "GET") as keyof Methods] as Handler | undefined;
    if (!handler) {
      res.writeHead(405).end();
      return;
    }
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
    const controller = new AbortController();
    res.on("close", () => controller.abort());
    const hasBody = req.method !== "GET" && req.method !== "HEAD";
    const init: RequestInit & { duplex?: "half" } = { method: req.method, headers, signal: controller.signal };
    if (hasBody) {
      init.body = Readable.toWeb(req) as ReadableStream<Uint8Array>;
      init.duplex = "half";
    }
    const params = Object.fromEntries(route.names.map((n, i) => [n, decodeURIComponent(match[i + 1]!)]));
    const response = await handler(new Request(url, init), { params: Promise.resolve(params) });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (!response.body) {
      res.end();
      return;
    }
    const body = Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>);
    res.on("close", () => {
      if (!res.writableFinished) body.destroy();
    });
    body.pipe(res);
    return;
  }
  res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: { code: "not_found", message: "no route" } }));
}

export interface CompatServer {
  origin: string;
  close: () => Promise<void>;
}

export async function startCompatServer(port = 0): Promise<CompatServer> {
  let origin = "";
  const server = http.createServer((req, res) => {
    dispatch(req, res, origin).catch((err) => {
      if (!res.headersSent) res.writeHead(500).end(String(err));
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    origin,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

if (process.argv[1]?.endsWith("http-server.ts")) {
  startCompatServer(Number(process.argv[2] ?? 0)).then((s) => process.stdout.write(`listening ${s.origin}\n`));
}
