import http from "node:http";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { GET as batchGET } from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/route";
import { GET as itemsGET } from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/items/route";
import { GET as csvGET } from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/results.csv/route";
import { GET as resultsGET } from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/results.jsonl/route";
import { POST as submitPOST } from "@/app/api/threads/[threadId]/subagent-batches/route";

/**
 * A bare Node HTTP server in front of the real batch route handlers (submit, batch detail, items
 * page, results.jsonl, results.csv), for bench/export.bench.ts when no production build is available (`next
 * start` is preferred) and for bench/scale.bench.ts. Adapts node:http to a Fetch Request (the
 * body streamed) and pipes the Response body back with backpressure.
 * Usage: tsx --conditions=react-server bench/export-server.ts <port> (DATABASE_URL in the environment;
 * the condition makes the route modules' `import "server-only"` resolve to its empty module).
 */

const port = Number(process.argv[2] ?? 3222);
type Handler = (req: Request, ctx: { params: Promise<Record<string, string>> }) => Promise<Response>;
const routes: Array<{ method: string; pattern: RegExp; names: string[]; handler: Handler }> = [
  { method: "POST", pattern: /^\/api\/threads\/([^/]+)\/subagent-batches$/, names: ["threadId"], handler: submitPOST as Handler },
  { method: "GET", pattern: /^\/api\/threads\/([^/]+)\/subagent-batches\/([^/]+)$/, names: ["threadId", "batchId"], handler: batchGET as Handler },
  { method: "GET", pattern: /^\/api\/threads\/([^/]+)\/subagent-batches\/([^/]+)\/items$/, names: ["threadId", "batchId"], handler: itemsGET as Handler },
  {
    method: "GET",
    pattern: /^\/api\/threads\/([^/]+)\/subagent-batches\/([^/]+)\/results\.jsonl$/,
    names: ["threadId", "batchId"],
    handler: resultsGET as Handler,
  },
  {
    method: "GET",
    pattern: /^\/api\/threads\/([^/]+)\/subagent-batches\/([^/]+)\/results\.csv$/,
    names: ["threadId", "batchId"],
    handler: csvGET as Handler,
  },
];

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", `http://127.0.0.1:${port}`);
  const route = routes.find((r) => r.method === req.method && r.pattern.test(url.pathname));
  const match = route?.pattern.exec(url.pathname);
  if (!route || !match) {
    res.writeHead(404).end();
    return;
  }
  const params = Object.fromEntries(route.names.map((n, i) => [n, match[i + 1]!]));
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
  const controller = new AbortController();
  res.on("close", () => controller.abort());
  const body = req.method === "GET" ? undefined : (Readable.toWeb(req) as unknown as ReadableStream<Uint8Array>);
  const request = new Request(url, { method: req.method, headers, body, signal: controller.signal, duplex: "half" } as RequestInit);
  const response = await route.handler(request, { params: Promise.resolve(params) });
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (!response.body) {
    res.end();
    return;
  }
  const out = Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>);
  // A client that goes away cancels the body (and with it the export's query), as Next does.
  res.on("close", () => {
    if (!res.writableFinished) out.destroy();
  });
  // An export that stops early (stalled, too long) cuts the connection, as Next does.
  out.on("error", (err) => res.destroy(err));
  out.pipe(res);
});

server.listen(port, "127.0.0.1", () => process.stdout.write(`listening ${port}\n`));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
