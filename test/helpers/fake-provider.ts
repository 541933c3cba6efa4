import { createHash, type Hash } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { parseToolCalls } from "@/server/models/simulator/grammar";

/**
 * The plumbing every fake provider server shares (fake-openai.ts, fake-anthropic.ts,
 * fake-gemini.ts): an HTTP server with a route table tests can extend (a provider's batch
 * endpoints are routes added beside its chat route), recorded requests, SSE writing, the
 * ~4-characters-a-token count and the two prompt caches providers run (prefixes cached
 * automatically, as OpenAI and Gemini do, and prefixes cached at marked breakpoints, as Anthropic does).
 */

export interface RecordedRequest<B = Record<string, unknown>> {
  method: string;
  /** The path with its query string, as it arrived. */
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body (undefined when the body was not JSON). */
  body: B | undefined;
  rawBody: string;
  receivedAt: number;
  /** The usage object the fake answered with (in the provider's own field names), once it answered. */
  usage?: Record<string, number>;
}

export interface RouteContext {
  /** The route's path pattern matched against the path without its query string. */
  match: RegExpMatchArray;
  query: URLSearchParams;
  /** True once the client has gone away (stop streaming). */
  closed(): boolean;
  /** This request's position in `requests`. */
  index: number;
}

export interface Route {
  method: string;
  path: RegExp;
  handle(req: RecordedRequest, res: ServerResponse, ctx: RouteContext): void | Promise<void>;
}

export interface FakeServer {
  /** http://127.0.0.1:<port> */
  origin: string;
  requests: RecordedRequest[];
  /** Adds a route; later routes are tried first, so a test can also override a built-in one. */
  route(route: Route): void;
  close(): Promise<void>;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  if (res.headersSent) return;
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

/** `port` 0 (the default) takes a free one; a browser test's server is configured with a fixed one. */
export async function startFakeServer(
  routes: Route[],
  notFound: (res: ServerResponse) => void = (res) => sendJson(res, 404, { error: { message: "not found" } }),
  port = 0,
): Promise<FakeServer> {
  const table = [...routes];
  const requests: RecordedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const rawBody = Buffer.concat(chunks).toString("utf8");
      let body: Record<string, unknown> | undefined;
      try {
        body = rawBody ? JSON.parse(rawBody) : undefined;
      } catch {
        body = undefined;
      }
      const recorded: RecordedRequest = {
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body,
        rawBody,
        receivedAt: Date.now(),
      };
      const index = requests.push(recorded) - 1;
      let closed = false;
      res.on("close", () => {
        closed = true;
      });
      const url = new URL(recorded.path, "http://fake");
      try {
        for (let i = table.length - 1; i >= 0; i--) {
          const route = table[i];
          const match = route.method === recorded.method ? url.pathname.match(route.path) : null;
          if (!match) continue;
          await route.handle(recorded, res, { match, query: url.searchParams, closed: () => closed, index });
          return;
        }
        notFound(res);
      } catch (err) {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: String(err) } }));
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    origin: `http://127.0.0.1:${bound}`,
    requests,
    route: (route) => {
      table.push(route);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The fakes count ~4 characters a token (at least 1 for a non-empty text). */
export function tokens(chars: number): number {
  return chars <= 0 ? 0 : Math.ceil(chars / 4);
}

/** Splits a text into word-sized stream deltas. */
export function words(text: string): string[] {
  return text.match(/\s*\S+\s*/g) ?? (text ? [text] : []);
}

/** An SSE writer that stops quietly once the client has gone. */
export function sse(res: ServerResponse, closed: () => boolean, pauseMs: number, headers: Record<string, string> = {}) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", ...headers });
  return {
    async send(data: unknown, event?: string) {
      if (closed()) return;
      res.write(`${event ? `event: ${event}\n` : ""}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`);
      if (pauseMs > 0) await sleep(pauseMs);
    },
    end() {
      if (!closed()) res.end();
    },
  };
}

export interface FakeToolCall {
  name: string;
  arguments: Record<string, unknown> | string;
  id?: string;
}

/** What a handler tells a fake to answer; each fake renders it in its provider's wire format. */
export type FakeReply =
  | {
      type: "text";
      text: string;
      /** Pause between streamed chunks (default 5 ms). */
      chunkDelayMs?: number;
      /** Overrides the counted usage (input counted as prompt_tokens, output as completion_tokens). */
      usage?: { prompt_tokens: number; completion_tokens: number };
    }
  | { type: "tool_calls"; calls: FakeToolCall[]; text?: string; chunkDelayMs?: number }
  | { type: "error"; status: number; headers?: Record<string, string>; body?: unknown };

export const argsText = (c: FakeToolCall) => (typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments));

/** A provider-neutral view of a chat request, for the default behaviour every fake shares. */
export interface ConversationView {
  lastUserText: string;
  /** The conversation ends with tool results; their texts. */
  toolResults: string[] | null;
  offeredTools: Set<string>;
}

/**
 * Default behaviour: "[[429]]" in the last user message → 429 (retry-after 2);
 * "[[call:NAME {json}]]" for an offered tool → that tool call; after tool results → a text naming
 * them; otherwise "Echo: <last user message>".
 */
export function defaultReplyFor(view: ConversationView, rateLimited: () => FakeReply): FakeReply {
  if (view.lastUserText.includes("[[429]]")) return rateLimited();
  if (view.toolResults) return { type: "text", text: `Tool results: ${view.toolResults.join(" | ")}` };
  const { calls } = parseToolCalls(view.lastUserText, view.offeredTools);
  if (calls.length > 0)
    return { type: "tool_calls", calls: calls.map((c) => ({ name: c.toolName, arguments: c.input })) };
  return { type: "text", text: `Echo: ${view.lastUserText}` };
}

function digest(h: Hash): string {
  return h.copy().digest("base64");
}

/**
 * Automatic prefix caching, as OpenAI (and Gemini's implicit caching) run it: a prompt's prefixes
 * at `minTokens`, then every `stepTokens` more, are remembered per namespace (model plus
 * prompt_cache_key); a later prompt reads the longest remembered prefix it starts with.
 */
export class PrefixCache {
  private seen = new Set<string>();
  constructor(
    private minTokens = 1024,
    private stepTokens = 128,
  ) {}

  /** Cached tokens for this prompt (0 when nothing was remembered), then remembers its prefixes. */
  lookupAndStore(namespace: string, prompt: string): number {
    const h = createHash("sha1").update(namespace).update("\u0000");
    let at = 0;
    let cached = 0;
    for (let t = this.minTokens; t * 4 <= prompt.length; t += this.stepTokens) {
      h.update(prompt.slice(at, t * 4));
      at = t * 4;
      const key = digest(h);
      if (this.seen.has(key)) cached = t;
      else this.seen.add(key);
    }
    return cached;
  }

  clear() {
    this.seen.clear();
  }
}

/** A unit of an Anthropic-style prompt in cache order; `mark` is a cache_control breakpoint after it. */
export interface PromptUnit {
  text: string;
  mark: boolean;
}

/**
 * Breakpoint caching, as Anthropic runs it: the exact prefix up to and including a block marked
 * cache_control is written on first sight when it is at least `minTokens` long, and read when a
 * later prompt carries the same marked prefix. Returns Anthropic's three input counts.
 */
export class BreakpointCache {
  private seen = new Set<string>();
  constructor(private minTokens = 1024) {}

  account(
    namespace: string,
    units: PromptUnit[],
  ): { input_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number } {
    const h = createHash("sha1").update(namespace).update("\u0000");
    let chars = 0;
    const marks: Array<{ key: string; tokens: number }> = [];
    for (const u of units) {
      h.update(u.text).update("\u0001");
      chars += u.text.length;
      if (u.mark) marks.push({ key: digest(h), tokens: tokens(chars) });
    }
    const total = tokens(chars);
    let read = 0;
    let lastHit = -1;
    for (const [i, m] of marks.entries())
      if (this.seen.has(m.key)) {
        read = m.tokens;
        lastHit = i;
      }
    let written = read;
    for (const m of marks.slice(lastHit + 1))
      if (m.tokens >= this.minTokens) {
        this.seen.add(m.key);
        written = m.tokens;
      }
    return { input_tokens: total - written, cache_read_input_tokens: read, cache_creation_input_tokens: written - read };
  }

  clear() {
    this.seen.clear();
  }
}
