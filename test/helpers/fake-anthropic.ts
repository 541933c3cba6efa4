import type { ServerResponse } from "node:http";
import {
  argsText,
  BreakpointCache,
  defaultReplyFor,
  type FakeReply,
  type FakeServer,
  type PromptUnit,
  type RecordedRequest as Recorded,
  sendJson,
  sleep,
  sse,
  startFakeServer,
  tokens,
  words,
} from "./fake-provider";
import { anthropicHeaders, type FakeAccount } from "./fake-rate-limits";

/**
 * A local stand-in for Anthropic's Messages API (POST {url}/messages, streamed and not), for tests
 * of the native anthropic provider: text, tool_use blocks, structured output (output_config.format
 * or the forced "json" tool), errors in Anthropic's shape, and prompt caching as Anthropic bills
 * it: a prefix up to and including a block marked cache_control, at least `minCacheTokens` long,
 * is written on first sight (cache_creation_input_tokens) and read afterwards
 * (cache_read_input_tokens); input_tokens counts only what is neither. Prompt order: tools, system,
 * messages. `server.route(...)` adds endpoints (message batches…).
 */

type Block = { type: string; text?: string; cache_control?: unknown; [key: string]: unknown };
type Message = { role: string; content: string | Block[] };

export interface MessagesBody {
  model?: string;
  system?: string | Block[];
  messages?: Message[];
  tools?: Array<{ name?: string; cache_control?: unknown; [key: string]: unknown }>;
  tool_choice?: { type?: string; name?: string };
  output_config?: { format?: { type?: string; schema?: unknown } };
  stream?: boolean;
  max_tokens?: number;
  [key: string]: unknown;
}

export type AnthropicRequest = Recorded<MessagesBody>;
export type AnthropicHandler = (req: AnthropicRequest, index: number) => FakeReply | Promise<FakeReply>;

export interface FakeAnthropic {
  /** Base URL as @ai-sdk/anthropic takes it (with /v1); the official SDK takes `server.origin`. */
  url: string;
  requests: AnthropicRequest[];
  server: FakeServer;
  cache: BreakpointCache;
  /** The Message JSON the fake answers a (non-streamed) body with, for batch endpoints. */
  complete(body: MessagesBody): Promise<{ status: number; body: unknown }>;
  close(): Promise<void>;
}

export function anthropicRateLimitReply(headers: Record<string, string> = { "retry-after": "2" }): FakeReply {
  return {
    type: "error",
    status: 429,
    headers,
    body: { type: "error", error: { type: "rate_limit_error", message: "Number of requests has exceeded your rate limit" } },
  };
}

const blocksOf = (content: string | Block[] | undefined): Block[] =>
  typeof content === "string" ? [{ type: "text", text: content }] : Array.isArray(content) ? content : [];

function blockText(b: Block): string {
  if (b.type === "text") return String(b.text ?? "");
  if (b.type === "tool_result")
    return typeof b.content === "string" ? b.content : blocksOf(b.content as Block[]).map(blockText).join("\n");
  const { cache_control: _, ...rest } = b;
  return JSON.stringify(rest);
}

/** The default behaviour every fake shares, read from Anthropic messages. */
export const defaultAnthropicHandler: AnthropicHandler = (req) => {
  const messages = req.body?.messages ?? [];
  const lastUser = [...messages].reverse().find((m) => m.role === "user" && blocksOf(m.content).some((b) => b.type === "text"));
  const lastBlocks = blocksOf(messages.at(-1)?.content);
  const results = lastBlocks.filter((b) => b.type === "tool_result");
  return defaultReplyFor(
    {
      lastUserText: blocksOf(lastUser?.content)
        .filter((b) => b.type === "text")
        .map(blockText)
        .join("\n"),
      toolResults: messages.at(-1)?.role === "user" && results.length > 0 ? results.map(blockText) : null,
      offeredTools: new Set((req.body?.tools ?? []).map((t) => String(t.name ?? ""))),
    },
    anthropicRateLimitReply,
  );
};

/** The prompt in cache order (tools, system, messages), each unit marked where cache_control sits. */
export function promptUnits(body: MessagesBody | undefined): PromptUnit[] {
  const units: PromptUnit[] = [];
  for (const t of body?.tools ?? []) {
    const { cache_control, ...rest } = t;
    units.push({ text: JSON.stringify(rest), mark: cache_control != null });
  }
  for (const b of blocksOf(body?.system)) units.push({ text: blockText(b), mark: b.cache_control != null });
  for (const m of body?.messages ?? []) {
    units.push({ text: `\n<${m.role}>`, mark: false });
    for (const b of blocksOf(m.content)) units.push({ text: blockText(b), mark: b.cache_control != null });
  }
  return units;
}

type Content = { type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: unknown };

function contentOf(body: MessagesBody | undefined, reply: Exclude<FakeReply, { type: "error" }>): Content[] {
  const text = reply.text ?? "";
  // Structured output through the forced "json" tool: the answer's JSON is that tool's input.
  const forced = body?.tool_choice?.type === "any" || (body?.tool_choice?.type === "tool" && body.tool_choice.name === "json");
  if (forced && reply.type === "text" && (body?.tools ?? []).some((t) => t.name === "json")) {
    let input: unknown = {};
    try {
      input = JSON.parse(text);
    } catch {}
    return [{ type: "tool_use", id: toolUseId(), name: "json", input }];
  }
  const calls = reply.type === "tool_calls" ? reply.calls : [];
  return [
    ...(text ? [{ type: "text" as const, text }] : []),
    ...calls.map((c) => ({
      type: "tool_use" as const,
      id: c.id ?? toolUseId(),
      name: c.name,
      input: JSON.parse(argsText(c) || "{}") as unknown,
    })),
  ];
}

const toolUseId = () => `toolu_fake_${Math.random().toString(36).slice(2, 12)}`;

function answer(req: AnthropicRequest, reply: Exclude<FakeReply, { type: "error" }>, cache: BreakpointCache) {
  const content = contentOf(req.body, reply);
  const outChars = content.reduce((n, c) => n + (c.type === "text" ? c.text.length : JSON.stringify(c.input).length), 0);
  const model = String(req.body?.model ?? "claude-fake");
  const counted = cache.account(model, promptUnits(req.body));
  const given = reply.type === "text" ? reply.usage : undefined;
  const usage = {
    ...(given
      ? { input_tokens: given.prompt_tokens, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 }
      : counted),
    output_tokens: given ? given.completion_tokens : Math.max(1, tokens(outChars)),
  };
  req.usage = usage;
  const usesTool = content.some((c) => c.type === "tool_use") && content.every((c) => c.type !== "tool_use" || c.name !== "json");
  return {
    id: `msg_fake_${Math.random().toString(36).slice(2, 12)}`,
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: usesTool ? "tool_use" : "end_turn",
    stop_sequence: null,
    usage,
  };
}

type Message_ = ReturnType<typeof answer>;

async function streamMessage(res: ServerResponse, m: Message_, pause: number, closed: () => boolean, headers: Record<string, string>) {
  const out = sse(res, closed, pause, headers);
  const { output_tokens, ...inputUsage } = m.usage;
  await out.send(
    { type: "message_start", message: { ...m, content: [], stop_reason: null, usage: { ...inputUsage, output_tokens: 1 } } },
    "message_start",
  );
  for (const [index, c] of m.content.entries()) {
    if (c.type === "text") {
      await out.send({ type: "content_block_start", index, content_block: { type: "text", text: "" } }, "content_block_start");
      for (const w of words(c.text))
        await out.send({ type: "content_block_delta", index, delta: { type: "text_delta", text: w } }, "content_block_delta");
    } else {
      await out.send(
        { type: "content_block_start", index, content_block: { type: "tool_use", id: c.id, name: c.name, input: {} } },
        "content_block_start",
      );
      const json = JSON.stringify(c.input);
      const step = Math.max(1, Math.ceil(json.length / 4));
      for (let at = 0; at < json.length; at += step)
        await out.send(
          { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: json.slice(at, at + step) } },
          "content_block_delta",
        );
    }
    await out.send({ type: "content_block_stop", index }, "content_block_stop");
  }
  await out.send(
    { type: "message_delta", delta: { stop_reason: m.stop_reason, stop_sequence: null }, usage: { output_tokens } },
    "message_delta",
  );
  await out.send({ type: "message_stop" }, "message_stop");
  out.end();
}

const errorBody = (reply: Extract<FakeReply, { type: "error" }>) =>
  reply.body ?? { type: "error", error: { type: "api_error", message: `HTTP ${reply.status}` } };

export async function startFakeAnthropic(
  options: {
    handler?: AnthropicHandler;
    minCacheTokens?: number;
    port?: number;
    /** Enforce an account's limits (fake-rate-limits.ts): anthropic-ratelimit-* on every answer, 429 + retry-after past them. */
    account?: FakeAccount;
    /** Time to the first byte of an admitted answer. */
    latencyMs?: number;
  } = {},
): Promise<FakeAnthropic> {
  const handler = options.handler ?? defaultAnthropicHandler;
  const cache = new BreakpointCache(options.minCacheTokens ?? 1024);
  const server = await startFakeServer(
    [
      {
        method: "POST",
        path: /^\/v1\/messages$/,
        async handle(req, res, ctx) {
          const recorded = req as AnthropicRequest;
          if (!recorded.body || !Array.isArray(recorded.body.messages))
            return sendJson(res, 400, { type: "error", error: { type: "invalid_request_error", message: "messages: Field required" } });
          const reply = await handler(recorded, ctx.index);
          if (reply.type === "error") return sendJson(res, reply.status, errorBody(reply), reply.headers);
          const m = answer(recorded, reply, cache);
          let headers: Record<string, string> = {};
          if (options.account) {
            const admission = options.account.admit({ input: m.usage.input_tokens, output: m.usage.output_tokens });
            headers = anthropicHeaders(admission);
            if (!admission.ok) {
              recorded.usage = undefined;
              return sendJson(res, 429, { type: "error", error: { type: "rate_limit_error", message: "Number of requests has exceeded your rate limit" } }, headers);
            }
          }
          if (options.latencyMs) await sleep(options.latencyMs);
          if (recorded.body.stream !== true) return sendJson(res, 200, m, headers);
          await streamMessage(res, m, reply.chunkDelayMs ?? 5, ctx.closed, headers);
        },
      },
    ],
    (res) => sendJson(res, 404, { type: "error", error: { type: "not_found_error", message: "Not found" } }),
    options.port,
  );
  return {
    url: `${server.origin}/v1`,
    requests: server.requests as AnthropicRequest[],
    server,
    cache,
    async complete(body) {
      const req: AnthropicRequest = { method: "POST", path: "/v1/messages", headers: {}, body, rawBody: JSON.stringify(body), receivedAt: Date.now() };
      const reply = await handler(req, -1);
      if (reply.type === "error") return { status: reply.status, body: errorBody(reply) };
      return { status: 200, body: answer(req, reply, cache) };
    },
    close: () => server.close(),
  };
}
