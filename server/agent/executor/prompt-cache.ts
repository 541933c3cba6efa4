import { asSchema, type ModelMessage, type SystemModelMessage, type ToolSet } from "ai";
import type { ModelProvider } from "@/lib/config";

/**
 * Prompt caching, applied to what one model call sends (the stored transcript stays as it is).
 * Anthropic caches a prefix up to a block marked cache_control: the system prompt (the tool
 * definitions come before it, so they are cached with it) and a batch's shared prefix (the
 * template's text before its first placeholder, sent as the user message's own first block) get
 * the mark when the prefix up to them is long enough for the model to cache. OpenAI caches
 * repeated prefixes by itself: the shared prefix already comes first, and `prompt_cache_key`
 * (`flotilla:<batch_id>`) keeps a batch's requests on the same cache.
 */
export interface PromptCache {
  provider?: ModelProvider;
  /** The provider model id (Anthropic's minimum cacheable length depends on it). */
  modelId: string;
  /** A batch's cache key (`flotilla:<batch_id>`). */
  key?: string;
  /** A batch's shared prefix: what every item's prompt starts with. */
  sharedPrefix?: string;
}

/**
 * Each input schema's JSON size, by schema object: converting a zod schema to JSON Schema costs
 * about a millisecond, and the tool factories hand out the same schema objects every call.
 */
const schemaChars = new WeakMap<object, number>();

function inputSchemaChars(schema: object): number {
  let n = schemaChars.get(schema);
  if (n === undefined) {
    try {
      n = JSON.stringify(asSchema(schema as Parameters<typeof asSchema>[0]).jsonSchema).length;
    } catch {
      n = 100;
    }
    schemaChars.set(schema, n);
  }
  return n;
}

/** The tool definitions' size as sent (name, description, input JSON schema), for cache lengths. */
export function toolChars(tools: ToolSet): number {
  let n = 0;
  for (const [name, t] of Object.entries(tools))
    n += name.length + (t.description?.length ?? 0) + (t.inputSchema ? inputSchemaChars(t.inputSchema) : 0);
  return n;
}

/** ~4 characters a token, as the estimates count. */
const CHARS_PER_TOKEN = 4;

/** Anthropic's shortest cacheable prefix in tokens: 2,048 on Haiku models, 1,024 on the others. */
export function anthropicMinCacheTokens(modelId: string): number {
  return /haiku/i.test(modelId) ? 2048 : 1024;
}

const EPHEMERAL = { anthropic: { cacheControl: { type: "ephemeral" } } } as const;

export interface CachedCall {
  system: string | SystemModelMessage;
  messages: ModelMessage[];
  providerOptions?: { openai: { promptCacheKey: string } };
}

/**
 * The system prompt, messages and provider options one call sends. `toolChars`: the size of the
 * tool definitions, which sit before the system prompt in Anthropic's cached prefix (asked for
 * only there: measuring tools is not free).
 */
export function withPromptCache(
  cache: PromptCache | undefined,
  call: { system: string; messages: ModelMessage[]; toolChars: () => number },
): CachedCall {
  if (!cache || (cache.provider !== "anthropic" && cache.provider !== "openai")) return { system: call.system, messages: call.messages };
  const messages = splitSharedPrefix(call.messages, cache.sharedPrefix ?? "");
  if (cache.provider === "openai")
    return { system: call.system, messages: messages.out, ...(cache.key ? { providerOptions: { openai: { promptCacheKey: cache.key } } } : {}) };
  const min = anthropicMinCacheTokens(cache.modelId) * CHARS_PER_TOKEN;
  const upToSystem = call.toolChars() + call.system.length;
  const system: CachedCall["system"] =
    upToSystem >= min ? { role: "system", content: call.system, providerOptions: EPHEMERAL } : call.system;
  const prefix = messages.prefix;
  if (prefix && upToSystem + prefix.text.length >= min) {
    const m = messages.out[prefix.index] as Extract<ModelMessage, { role: "user" }>;
    const [head, ...rest] = m.content as Array<{ type: "text"; text: string }>;
    messages.out[prefix.index] = { ...m, content: [{ ...head, providerOptions: EPHEMERAL }, ...rest] };
  }
  return { system, messages: messages.out };
}

/**
 * The first user message, when it is a text that starts with the shared prefix, as two text parts:
 * the prefix, then the rest. Every other message is sent as it is.
 */
function splitSharedPrefix(
  messages: ModelMessage[],
  prefix: string,
): { out: ModelMessage[]; prefix?: { index: number; text: string } } {
  const index = messages.findIndex((m) => m.role === "user");
  const first = messages[index];
  if (!prefix.trim() || first?.role !== "user" || typeof first.content !== "string") return { out: messages };
  const text = first.content;
  if (!text.startsWith(prefix) || text.length === prefix.length) return { out: messages };
  const out = [...messages];
  out[index] = {
    ...first,
    content: [
      { type: "text", text: prefix },
      { type: "text", text: text.slice(prefix.length) },
    ],
  };
  return { out, prefix: { index, text: prefix } };
}
