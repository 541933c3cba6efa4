import http from "node:http";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { GET as itemsGET } from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/items/route";
import { GET as resultsGET } from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/results.jsonl/route";

/**
 * A bare Node HTTP server in front of the real results.jsonl and items route handlers, for
 * bench/export.bench.ts when no production build is available (`next start` is preferred).
 * Adapts node:http to a Fetch Request and pipes the Response body back with backpressure.
 * Usage: tsx bench/export-server.ts <port> (DATABASE_URL in the environment).
 */

const port = Number(process.argv[2] ?? 3222);
const pattern = /^\/api\/threads\/([^/]+)\/subagent-batches\/([^/]+)\/(results\.jsonl|items)$/;

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", `http://127.0.0.1:${port}`);
  const match = pattern.exec(url.pathname);
  if (!match || req.method !== "GET") {
    res.writeHead(404).end();
    return;
  }
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers.set(k, v);
  const controller = new AbortController();
  res.on("close", () => controller.abort());
  const handler = match[3] === "items" ? itemsGET : resultsGET;
  const response = await handler(new Request(url, { headers, signal: controller.signal }), {
    params: Promise.resolve({ threadId: match[1]!, batchId: match[2]! }),
  });
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (!response.body) {
    res.end();
    return;
  }
  const body = Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>);
  // A client that goes away cancels the body (and with it the export's transaction), as Next does.
  res.on("close", () => {
    if (!res.writableFinished) body.destroy();
  });
  body.pipe(res);
});

server.listen(port, "127.0.0.1", () => process.stdout.write(`listening ${port}\n`));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
