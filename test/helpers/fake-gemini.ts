import {
  argsText,
  defaultReplyFor,
  type FakeReply,
  type FakeServer,
  PrefixCache,
  type RecordedRequest as Recorded,
  sendJson,
  sse,
  startFakeServer,
  tokens,
  words,
} from "./fake-provider";

/**
 * A local stand-in for the Gemini API as @ai-sdk/google calls it: POST
 * {url}/models/{model}:generateContent and :streamGenerateContent?alt=sse, with text,
 * functionCall parts, JSON answers (generationConfig.responseMimeType) and usageMetadata,
 * including cachedContentTokenCount from implicit caching (a repeated prefix of at least
 * `minCacheTokens`, per model). `server.route(...)` adds endpoints.
 */

type Part = { text?: string; functionCall?: { name: string; args?: unknown }; functionResponse?: { name: string; response?: unknown }; [key: string]: unknown };
type Content = { role?: string; parts?: Part[] };

export interface GenerateContentBody {
  contents?: Content[];
  systemInstruction?: Content;
  tools?: Array<{ functionDeclarations?: Array<{ name: string; [key: string]: unknown }> }>;
  generationConfig?: { responseMimeType?: string; responseSchema?: unknown; [key: string]: unknown };
  [key: string]: unknown;
}

export type GeminiRequest = Recorded<GenerateContentBody>;
export type GeminiHandler = (req: GeminiRequest, index: number) => FakeReply | Promise<FakeReply>;

export interface FakeGemini {
  /** Base URL as @ai-sdk/google takes it (with /v1beta). */
  url: string;
  requests: GeminiRequest[];
  server: FakeServer;
  cache: PrefixCache;
  close(): Promise<void>;
}

export function geminiRateLimitReply(): FakeReply {
  return {
    type: "error",
    status: 429,
    headers: { "retry-after": "2" },
    body: { error: { code: 429, message: "Resource has been exhausted (e.g. check quota).", status: "RESOURCE_EXHAUSTED" } },
  };
}

const partText = (p: Part) =>
  p.text ?? (p.functionResponse ? JSON.stringify(p.functionResponse.response ?? null) : p.functionCall ? JSON.stringify(p.functionCall) : "");

/** The default behaviour every fake shares, read from Gemini contents. */
export const defaultGeminiHandler: GeminiHandler = (req) => {
  const contents = req.body?.contents ?? [];
  const last = contents.at(-1);
  const lastUser = [...contents].reverse().find((c) => c.role === "user" && (c.parts ?? []).some((p) => p.text != null));
  const results = (last?.parts ?? []).filter((p) => p.functionResponse);
  return defaultReplyFor(
    {
      lastUserText: (lastUser?.parts ?? []).map((p) => p.text ?? "").join("\n"),
      toolResults: results.length > 0 ? results.map(partText) : null,
      offeredTools: new Set((req.body?.tools ?? []).flatMap((t) => (t.functionDeclarations ?? []).map((f) => f.name))),
    },
    geminiRateLimitReply,
  );
};

function promptText(body: GenerateContentBody | undefined): string {
  const head = JSON.stringify([body?.tools ?? null, body?.generationConfig?.responseSchema ?? null]);
  const system = (body?.systemInstruction?.parts ?? []).map(partText).join("");
  return `${head}${system}${(body?.contents ?? []).map((c) => `\n<${c.role}>${(c.parts ?? []).map(partText).join("")}`).join("")}`;
}

export async function startFakeGemini(options: { handler?: GeminiHandler; minCacheTokens?: number } = {}): Promise<FakeGemini> {
  const handler = options.handler ?? defaultGeminiHandler;
  const cache = new PrefixCache(options.minCacheTokens ?? 1024, 1);
  const server = await startFakeServer([
    {
      method: "POST",
      path: /^\/v1beta\/models\/([^/:]+):(generateContent|streamGenerateContent)$/,
      async handle(req, res, ctx) {
        const recorded = req as GeminiRequest;
        const reply = await handler(recorded, ctx.index);
        if (reply.type === "error") return sendJson(res, reply.status, reply.body ?? { error: { code: reply.status, message: "error" } }, reply.headers);
        const model = ctx.match[1];
        const text = reply.text ?? "";
        const calls = reply.type === "tool_calls" ? reply.calls : [];
        const prompt = promptText(recorded.body);
        const given = reply.type === "text" ? reply.usage : undefined;
        const promptTokenCount = given?.prompt_tokens ?? Math.max(1, tokens(prompt.length));
        const cachedContentTokenCount = Math.min(promptTokenCount, cache.lookupAndStore(model, prompt));
        const candidatesTokenCount =
          given?.completion_tokens ?? Math.max(1, tokens(text.length + calls.reduce((n, c) => n + argsText(c).length, 0)));
        const usageMetadata = {
          promptTokenCount,
          candidatesTokenCount,
          totalTokenCount: promptTokenCount + candidatesTokenCount,
          ...(cachedContentTokenCount > 0 ? { cachedContentTokenCount } : {}),
        };
        recorded.usage = { promptTokenCount, candidatesTokenCount, cachedContentTokenCount };
        const callParts = calls.map((c) => ({ functionCall: { name: c.name, args: JSON.parse(argsText(c) || "{}") } }));
        const responseId = `fake-${Math.random().toString(36).slice(2, 10)}`;
        const response = (parts: Part[], last: boolean) => ({
          candidates: [{ content: { role: "model", parts }, index: 0, ...(last ? { finishReason: "STOP" } : {}) }],
          ...(last ? { usageMetadata } : {}),
          modelVersion: model,
          responseId,
        });
        if (ctx.match[2] === "generateContent")
          return sendJson(res, 200, response([...(text ? [{ text }] : []), ...callParts], true));
        const out = sse(res, ctx.closed, reply.chunkDelayMs ?? 5);
        const pieces = words(text);
        for (const w of pieces.slice(0, -1)) await out.send(response([{ text: w }], false));
        await out.send(response([...(pieces.length ? [{ text: pieces.at(-1) }] : []), ...callParts], true));
        out.end();
      },
    },
  ]);
  return {
    url: `${server.origin}/v1beta`,
    requests: server.requests as GeminiRequest[],
    server,
    cache,
    close: () => server.close(),
  };
}
