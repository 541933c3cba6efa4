import type { ServerResponse } from "node:http";
import {
  argsText,
  defaultReplyFor,
  type FakeReply,
  type FakeServer,
  PrefixCache,
  type RecordedRequest as Recorded,
  sendJson,
  sleep,
  sse,
  startFakeServer,
  tokens as countTokens,
  words,
} from "./fake-provider";
import { type FakeAccount, openAIHeaders } from "./fake-rate-limits";

export type { FakeReply, FakeToolCall } from "./fake-provider";

/**
 * A local stand-in for an OpenAI(-compatible) endpoint (POST {url}/chat/completions), for tests of
 * the real provider path: streamed SSE chunks, streamed tool calls, usage, and error statuses such
 * as 429 with retry-after. Every request is recorded. Like OpenAI it caches prompt prefixes of at
 * least 1,024 tokens by itself (per model and prompt_cache_key) and reports them as
 * usage.prompt_tokens_details.cached_tokens. `server.route(...)` adds endpoints (batch files…).
 */

export type ChatMessage = { role: string; content?: unknown; tool_call_id?: string; tool_calls?: unknown[] };

export interface ChatRequestBody {
  model?: string;
  messages?: ChatMessage[];
  tools?: Array<{ type?: string; function?: { name?: string; description?: string; parameters?: unknown } }>;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  prompt_cache_key?: string;
  [key: string]: unknown;
}

export type RecordedRequest = Recorded<ChatRequestBody>;

export type FakeHandler = (req: RecordedRequest, index: number) => FakeReply | Promise<FakeReply>;

export interface FakeOpenAI {
  /** Base URL to use as MODEL_BASE_URL, e.g. http://127.0.0.1:41234/v1 */
  url: string;
  requests: RecordedRequest[];
  /** The server underneath: add routes to it (paths begin /v1/). */
  server: FakeServer;
  /** The prompt-prefix cache (clear it to start cold). */
  cache: PrefixCache;
  /**
   * What the fake answers a (non-streamed) chat completion body with, through the same handler
   * and cache, for endpoints that answer many at once (a batch's output file).
   */
  complete(body: ChatRequestBody): Promise<{ status: number; body: unknown }>;
  close(): Promise<void>;
}

const rateLimitBody = { error: { message: "Rate limit reached for requests", type: "requests", code: "rate_limit_exceeded" } };

/** A 429 in OpenAI's shape. */
export function rateLimitReply(headers: Record<string, string> = { "retry-after": "2" }): FakeReply {
  return { type: "error", status: 429, headers, body: rateLimitBody };
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content))
    return content.map((p) => (p && typeof p === "object" && "text" in p ? String(p.text) : "")).join("\n");
  return "";
}

/** The default behaviour every fake shares (see defaultReplyFor), read from chat messages. */
export const defaultFakeHandler: FakeHandler = (req) => {
  const messages: ChatMessage[] = Array.isArray(req.body?.messages) ? req.body.messages : [];
  const last = messages.at(-1);
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  return defaultReplyFor(
    {
      lastUserText: contentText(lastUser?.content),
      toolResults:
        last?.role === "tool" ? messages.filter((m) => m.role === "tool").map((m) => contentText(m.content)) : null,
      offeredTools: new Set((req.body?.tools ?? []).map((t) => t.function?.name ?? "")),
    },
    rateLimitReply,
  );
};

const tokens = (chars: number) => Math.max(1, countTokens(chars));

/** The prompt as the fake caches it: tools and response format first, then each message in order. */
function promptText(body: ChatRequestBody | undefined): string {
  const head = JSON.stringify([body?.tools ?? null, body?.response_format ?? null]);
  const messages = (body?.messages ?? []).map(
    (m) => `\n<${m.role}>${contentText(m.content)}${m.tool_calls ? JSON.stringify(m.tool_calls) : ""}`,
  );
  return head + messages.join("");
}

type Answer = {
  id: string;
  model: string;
  created: number;
  text: string;
  calls: Array<{ id: string; name: string; args: string }>;
  finishReason: "stop" | "tool_calls";
  usage: Record<string, unknown> & { prompt_tokens: number; completion_tokens: number; total_tokens: number };
};

function answer(req: RecordedRequest, reply: Exclude<FakeReply, { type: "error" }>, cache: PrefixCache): Answer {
  const calls = (reply.type === "tool_calls" ? reply.calls : []).map((c, i) => ({
    id: c.id ?? `call_fake_${i}_${Math.random().toString(36).slice(2, 8)}`,
    name: c.name,
    args: argsText(c),
  }));
  const text = reply.text ?? "";
  const given = reply.type === "text" ? reply.usage : undefined;
  const model = String(req.body?.model ?? "fake-model");
  const prompt = promptText(req.body);
  const counted = given ?? {
    prompt_tokens: tokens(req.rawBody.length),
    completion_tokens: tokens(text.length + calls.reduce((n, c) => n + c.args.length, 0)),
  };
  const cached = Math.min(
    counted.prompt_tokens,
    cache.lookupAndStore(`${model}\u0000${req.body?.prompt_cache_key ?? ""}`, prompt),
  );
  const usage = {
    ...counted,
    total_tokens: counted.prompt_tokens + counted.completion_tokens,
    prompt_tokens_details: { cached_tokens: cached },
  };
  req.usage = { prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens, cached_tokens: cached };
  return {
    id: `chatcmpl-fake-${Math.random().toString(36).slice(2, 10)}`,
    model,
    created: Math.floor(Date.now() / 1000),
    text,
    calls,
    finishReason: calls.length > 0 ? "tool_calls" : "stop",
    usage,
  };
}

function completionJson(a: Answer) {
  const toolCalls = a.calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args } }));
  return {
    id: a.id,
    object: "chat.completion",
    created: a.created,
    model: a.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: a.text || null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) },
        finish_reason: a.finishReason,
      },
    ],
    usage: a.usage,
  };
}

function errorBody(reply: Extract<FakeReply, { type: "error" }>) {
  return reply.body ?? { error: { message: `HTTP ${reply.status}`, type: "error" } };
}

async function streamAnswer(
  res: ServerResponse,
  req: RecordedRequest,
  a: Answer,
  pause: number,
  closed: () => boolean,
  headers: Record<string, string>,
) {
  const out = sse(res, closed, pause, headers);
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    out.send({
      id: a.id,
      object: "chat.completion.chunk",
      created: a.created,
      model: a.model,
      choices: [{ index: 0, delta, finish_reason: finish }],
    });
  await chunk({ role: "assistant", content: "" });
  for (const w of words(a.text)) await chunk({ content: w });
  for (const [i, c] of a.calls.entries()) {
    await chunk({ tool_calls: [{ index: i, id: c.id, type: "function", function: { name: c.name, arguments: "" } }] });
    // Arguments arrive in several pieces, as real providers send them.
    const step = Math.max(1, Math.ceil(c.args.length / 4));
    for (let at = 0; at < c.args.length; at += step)
      await chunk({ tool_calls: [{ index: i, function: { arguments: c.args.slice(at, at + step) } }] });
  }
  await chunk({}, a.finishReason);
  if (req.body?.stream_options?.include_usage)
    await out.send({ id: a.id, object: "chat.completion.chunk", created: a.created, model: a.model, choices: [], usage: a.usage });
  await out.send("[DONE]");
  out.end();
}

export async function startFakeOpenAI(
  options: {
    handler?: FakeHandler;
    /** Enforce an account's limits (fake-rate-limits.ts): x-ratelimit-* on every answer, 429 + retry-after-ms past them. */
    account?: FakeAccount;
    /** Time to the first byte of an admitted answer. */
    latencyMs?: number;
    /** Headers sent on every answer (e.g. broken rate-limit headers). */
    headers?: Record<string, string>;
  } = {},
): Promise<FakeOpenAI> {
  const handler = options.handler ?? defaultFakeHandler;
  const cache = new PrefixCache(1024, 128);
  const server = await startFakeServer([
    {
      method: "POST",
      path: /\/chat\/completions$/,
      async handle(req, res, ctx) {
        const recorded = req as RecordedRequest;
        const reply = await handler(recorded, ctx.index);
        if (reply.type === "error") return sendJson(res, reply.status, errorBody(reply), reply.headers);
        const a = answer(recorded, reply, cache);
        let headers: Record<string, string> = { ...options.headers };
        if (options.account) {
          const admission = options.account.admit({ input: a.usage.prompt_tokens, output: a.usage.completion_tokens });
          headers = { ...openAIHeaders(admission), ...headers };
          if (!admission.ok) {
            recorded.usage = undefined;
            return sendJson(res, 429, rateLimitBody, headers);
          }
        }
        if (options.latencyMs) await sleep(options.latencyMs);
        if (recorded.body?.stream !== true) return sendJson(res, 200, completionJson(a), headers);
        await streamAnswer(res, recorded, a, reply.chunkDelayMs ?? 5, ctx.closed, headers);
      },
    },
  ]);
  return {
    url: `${server.origin}/v1`,
    requests: server.requests as RecordedRequest[],
    server,
    cache,
    async complete(body) {
      const rawBody = JSON.stringify(body);
      const req: RecordedRequest = { method: "POST", path: "/v1/chat/completions", headers: {}, body, rawBody, receivedAt: Date.now() };
      const reply = await handler(req, -1);
      if (reply.type === "error") return { status: reply.status, body: errorBody(reply) };
      return { status: 200, body: completionJson(answer(req, reply, cache)) };
    },
    close: () => server.close(),
  };
}
