import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { parseToolCalls } from "@/server/models/simulator/grammar";

/**
 * A local stand-in for an OpenAI-compatible endpoint (POST {url}/chat/completions), for tests of
 * the real provider path: streamed SSE chunks, streamed tool calls, usage, and error statuses such
 * as 429 with retry-after. Every request is recorded.
 */

export type ChatMessage = { role: string; content?: unknown; tool_call_id?: string; tool_calls?: unknown[] };

export interface ChatRequestBody {
  model?: string;
  messages?: ChatMessage[];
  tools?: Array<{ type?: string; function?: { name?: string; description?: string; parameters?: unknown } }>;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  [key: string]: unknown;
}

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body (undefined when the body was not JSON). */
  body: ChatRequestBody | undefined;
  rawBody: string;
  receivedAt: number;
}

export interface FakeToolCall {
  name: string;
  arguments: Record<string, unknown> | string;
  id?: string;
}

export type FakeReply =
  | {
      type: "text";
      text: string;
      /** Pause between streamed chunks (default 5 ms). */
      chunkDelayMs?: number;
      usage?: { prompt_tokens: number; completion_tokens: number };
    }
  | { type: "tool_calls"; calls: FakeToolCall[]; text?: string; chunkDelayMs?: number }
  | { type: "error"; status: number; headers?: Record<string, string>; body?: unknown };

export type FakeHandler = (req: RecordedRequest, index: number) => FakeReply | Promise<FakeReply>;

export interface FakeOpenAI {
  /** Base URL to use as MODEL_BASE_URL, e.g. http://127.0.0.1:41234/v1 */
  url: string;
  requests: RecordedRequest[];
  close(): Promise<void>;
}

/** A 429 in OpenAI's shape. */
export function rateLimitReply(headers: Record<string, string> = { "retry-after": "2" }): FakeReply {
  return {
    type: "error",
    status: 429,
    headers,
    body: { error: { message: "Rate limit reached for requests", type: "requests", code: "rate_limit_exceeded" } },
  };
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content.map((p) => (p && typeof p === "object" && "text" in p ? String(p.text) : "")).join("\n");
  return "";
}

/**
 * Default behaviour: "[[429]]" in the last user message → 429 (retry-after 2);
 * "[[call:NAME {json}]]" for an offered tool → that tool call; after tool results → a text naming
 * them; otherwise "Echo: <last user message>".
 */
export const defaultFakeHandler: FakeHandler = (req) => {
  const messages: ChatMessage[] = Array.isArray(req.body?.messages) ? req.body.messages : [];
  const last = messages.at(-1);
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const userText = contentText(lastUser?.content);
  if (userText.includes("[[429]]")) return rateLimitReply();
  if (last?.role === "tool") {
    const results = messages.filter((m) => m.role === "tool").map((m) => contentText(m.content));
    return { type: "text", text: `Tool results: ${results.join(" | ")}` };
  }
  const offered = new Set<string>(
    (req.body?.tools ?? []).map((t) => t.function?.name ?? ""),
  );
  const { calls } = parseToolCalls(userText, offered);
  if (last?.role === "user" && calls.length > 0)
    return { type: "tool_calls", calls: calls.map((c) => ({ name: c.toolName, arguments: c.input })) };
  return { type: "text", text: `Echo: ${userText}` };
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function words(text: string): string[] {
  return text.match(/\s*\S+\s*/g) ?? (text ? [text] : []);
}

function tokens(chars: number): number {
  return Math.max(1, Math.ceil(chars / 4));
}

async function writeReply(res: ServerResponse, req: RecordedRequest, reply: FakeReply, isClosed: () => boolean) {
  if (reply.type === "error") {
    res.writeHead(reply.status, { "content-type": "application/json", ...reply.headers });
    res.end(JSON.stringify(reply.body ?? { error: { message: `HTTP ${reply.status}`, type: "error" } }));
    return;
  }
  const id = `chatcmpl-fake-${Math.random().toString(36).slice(2, 10)}`;
  const model = String(req.body?.model ?? "fake-model");
  const created = Math.floor(Date.now() / 1000);
  const calls = reply.type === "tool_calls" ? reply.calls : [];
  const text = reply.text ?? "";
  const argsOf = (c: FakeToolCall) => (typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments));
  const callIds = calls.map((c, i) => c.id ?? `call_fake_${i}_${Math.random().toString(36).slice(2, 8)}`);
  const outChars = text.length + calls.reduce((n, c) => n + argsOf(c).length, 0);
  const usage =
    (reply.type === "text" ? reply.usage : undefined) ?? {
      prompt_tokens: tokens(req.rawBody.length),
      completion_tokens: tokens(outChars),
    };
  const finishReason = calls.length > 0 ? "tool_calls" : "stop";

  if (req.body?.stream !== true) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        id,
        object: "chat.completion",
        created,
        model,
        choices: [
          {
            index: 0,
            message: {
              role: "assistant",
              content: text || null,
              ...(calls.length
                ? {
                    tool_calls: calls.map((c, i) => ({
                      id: callIds[i],
                      type: "function",
                      function: { name: c.name, arguments: argsOf(c) },
                    })),
                  }
                : {}),
            },
            finish_reason: finishReason,
          },
        ],
        usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
      }),
    );
    return;
  }

  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
  const pause = reply.chunkDelayMs ?? 5;
  const send = async (delta: Record<string, unknown>, finish: string | null = null) => {
    if (isClosed()) return;
    res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
    if (pause > 0) await sleep(pause);
  };
  await send({ role: "assistant", content: "" });
  for (const w of words(text)) await send({ content: w });
  for (const [i, c] of calls.entries()) {
    await send({ tool_calls: [{ index: i, id: callIds[i], type: "function", function: { name: c.name, arguments: "" } }] });
    const args = argsOf(c);
    // Arguments arrive in several pieces, as real providers send them.
    const step = Math.max(1, Math.ceil(args.length / 4));
    for (let at = 0; at < args.length; at += step)
      await send({ tool_calls: [{ index: i, function: { arguments: args.slice(at, at + step) } }] });
  }
  await send({}, finishReason);
  if (isClosed()) return;
  if (req.body?.stream_options?.include_usage) {
    res.write(
      `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices: [], usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } })}\n\n`,
    );
  }
  res.write("data: [DONE]\n\n");
  res.end();
}

export async function startFakeOpenAI(options: { handler?: FakeHandler } = {}): Promise<FakeOpenAI> {
  const handler = options.handler ?? defaultFakeHandler;
  const requests: RecordedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const rawBody = Buffer.concat(chunks).toString("utf8");
      let body: ChatRequestBody | undefined;
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
      try {
        if (req.method !== "POST" || !recorded.path.endsWith("/chat/completions")) {
          await writeReply(res, recorded, { type: "error", status: 404, body: { error: { message: "not found" } } }, () => closed);
          return;
        }
        await writeReply(res, recorded, await handler(recorded, index), () => closed);
      } catch (err) {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: String(err) } }));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
