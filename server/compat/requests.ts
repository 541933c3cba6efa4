import { createHash } from "node:crypto";
import { z } from "zod";
import { type OutputSchema, outputSchemaSchema } from "@/lib/api/batch-data";
import { SchemaRefusal, schemaChecker } from "@/server/runtime/output-schema";

/**
 * The requests a compatible batch runs, as the providers' SDKs send them: OpenAI chat
 * completions (one JSONL line each) and Anthropic Messages `params`. Both are normalized to one
 * CompatRequest (what server/compat/execute.ts hands to the model), stored with the item.
 * Pure: no database, so the line validator can be property-tested on its own.
 */

/**
 * A JSON answer the request asked for (OpenAI's `response_format`): `json_object` is any JSON
 * object, `json_schema` a value valid against its schema. The answer's content is then that JSON.
 */
export type CompatResponseFormat = { type: "json_object" } | { type: "json_schema"; name: string; schema: OutputSchema };

export interface CompatRequest {
  /** A catalog name, or `flotilla:<sub-agent>`. */
  model: string;
  system?: string;
  messages: { role: "user" | "assistant"; content: string }[];
  temperature?: number;
  max_tokens?: number;
  stop?: string[];
  top_p?: number;
  response_format?: CompatResponseFormat;
}

export const SUBAGENT_MODEL_PREFIX = "flotilla:";
const SCHEMA_PARAM = "body.response_format.json_schema.schema";
export const CUSTOM_ID_MAX = 512;

const textPart = z.object({ type: z.literal("text"), text: z.string() });
const textContent = z.union([z.string(), z.array(textPart).min(1)], {
  error: "only text content is supported (a string or an array of text parts)",
});
// Tool definitions in a request would be silently dropped; a sub-agent brings its own tools.
const noTools = z
  .never({ error: "tools in a batch request are not supported; use model flotilla:<sub-agent> to run with a sub-agent's tools" })
  .optional();

const joinText = (c: z.infer<typeof textContent>) => (typeof c === "string" ? c : c.map((p) => p.text).join("\n"));

// OpenAI's own rule for a response format's name.
const FORMAT_NAME = /^[A-Za-z0-9_-]{1,64}$/;

const responseFormatSchema = z.discriminatedUnion(
  "type",
  [
    z.looseObject({ type: z.literal("text") }),
    z.looseObject({ type: z.literal("json_object") }),
    z.looseObject({
      type: z.literal("json_schema"),
      json_schema: z.looseObject({
        name: z.string().regex(FORMAT_NAME, "must be 1 to 64 letters, digits, _ or -"),
        description: z.string().optional(),
        schema: outputSchemaSchema,
        strict: z.boolean().nullish(),
      }),
    }),
  ],
  { error: 'must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {...}}' },
);

/** The chat-completions request body, as far as a batch line can use it (other keys are ignored). */
export const chatCompletionBodySchema = z.looseObject({
  model: z.string().min(1),
  messages: z
    .array(
      z.looseObject({
        role: z.enum(["system", "developer", "user", "assistant"]),
        content: textContent,
      }),
    )
    .min(1),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  max_tokens: z.number().int().positive().nullish(),
  max_completion_tokens: z.number().int().positive().nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  n: z.literal(1, { error: "only n = 1 is supported" }).nullish(),
  stream: z.literal(false, { error: "a batch request cannot stream" }).nullish(),
  response_format: responseFormatSchema.nullish(),
  tools: noTools,
  functions: noTools,
});

function responseFormatOf(format: z.infer<typeof responseFormatSchema> | null | undefined): CompatResponseFormat | undefined {
  if (format?.type === "json_object") return { type: "json_object" };
  if (format?.type === "json_schema") return { type: "json_schema", name: format.json_schema.name, schema: format.json_schema.schema };
  return undefined;
}

export function normalizeChatBody(body: z.infer<typeof chatCompletionBodySchema>): CompatRequest {
  const system = body.messages
    .filter((m) => m.role === "system" || m.role === "developer")
    .map((m) => joinText(m.content))
    .join("\n\n");
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  const responseFormat = responseFormatOf(body.response_format);
  return {
    model: body.model,
    ...(system ? { system } : {}),
    messages: body.messages
      .filter((m): m is typeof m & { role: "user" | "assistant" } => m.role === "user" || m.role === "assistant")
      .map((m) => ({ role: m.role, content: joinText(m.content) })),
    ...(body.temperature != null ? { temperature: body.temperature } : {}),
    ...(body.top_p != null ? { top_p: body.top_p } : {}),
    ...(maxTokens != null ? { max_tokens: maxTokens } : {}),
    ...(body.stop != null ? { stop: typeof body.stop === "string" ? [body.stop] : body.stop } : {}),
    ...(responseFormat ? { response_format: responseFormat } : {}),
  };
}

/** Anthropic Messages `params` (non-streaming), as far as a batch request can use them. */
export const messageParamsSchema = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().positive(),
  messages: z.array(z.looseObject({ role: z.enum(["user", "assistant"]), content: textContent })).min(1),
  system: textContent.optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  stop_sequences: z.array(z.string()).optional(),
  stream: z.literal(false, { error: "a batch request cannot stream" }).optional(),
  tools: noTools,
});

export function normalizeMessageParams(params: z.infer<typeof messageParamsSchema>): CompatRequest {
  return {
    model: params.model,
    ...(params.system !== undefined ? { system: joinText(params.system) } : {}),
    messages: params.messages.map((m) => ({ role: m.role, content: joinText(m.content) })),
    max_tokens: params.max_tokens,
    ...(params.temperature !== undefined ? { temperature: params.temperature } : {}),
    ...(params.top_p !== undefined ? { top_p: params.top_p } : {}),
    ...(params.stop_sequences?.length ? { stop: params.stop_sequences } : {}),
  };
}

/** What a model name may be; the caller knows its catalog and sub-agents. */
export type ModelCheck = (name: string) => string | null;

/** The text the panel shows as an item's input: the last user message. */
export function promptOf(request: CompatRequest): string {
  const last = [...request.messages].reverse().find((m) => m.role === "user") ?? request.messages.at(-1);
  return last?.content ?? "";
}

// ---------------------------------------------------------------------------------------------
// OpenAI batch input lines

/** One entry of OpenAI's `errors.data`. */
export interface LineError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

export type LineResult = { ok: true; customId: string; request: CompatRequest } | { ok: false; error: LineError };

const lineSchema = z.looseObject({
  custom_id: z.string().min(1).max(CUSTOM_ID_MAX),
  method: z.string(),
  url: z.string(),
  body: z.unknown(),
});

function issuePath(path: readonly PropertyKey[]): string {
  return path.map(String).join(".");
}

/** A batch input file's distinct response_format schemas, together. */
export const FILE_MAX_SCHEMAS = 100;
/** Their JSON text, together (characters). */
export const FILE_MAX_SCHEMA_CHARS = 1_048_576;
/** Their patterns' compiled programs, together (RE2 instructions). */
export const FILE_MAX_SCHEMA_INSTRUCTIONS = 200_000;

/**
 * The schemas of one batch input file: each distinct schema text is checked once (both passes
 * over the file share this), by a checker whose compiled validators go when the file is done,
 * and the distinct ones together stay within the file's budget. Remembers each schema by its
 * hash and verdict only.
 */
export interface FileSchemas {
  check: ReturnType<typeof schemaChecker>;
  verdicts: Map<string, SchemaRefusal | null>;
  chars: number;
  instructions: number;
}

export const newFileSchemas = (): FileSchemas => ({ check: schemaChecker(), verdicts: new Map(), chars: 0, instructions: 0 });

function fileSchemaRefusal(schema: unknown, files: FileSchemas): SchemaRefusal | null {
  const text = JSON.stringify(schema);
  const key = createHash("sha256").update(text).digest("base64");
  const known = files.verdicts.get(key);
  if (known !== undefined) return known;
  const over = (what: string) =>
    new SchemaRefusal(SCHEMA_PARAM, `the file's distinct response_format schemas are over its budget: ${what}; use fewer distinct schemas in one batch file`);
  if (files.verdicts.size >= FILE_MAX_SCHEMAS) return over(`at most ${FILE_MAX_SCHEMAS} distinct schemas`);
  if (files.chars + text.length > FILE_MAX_SCHEMA_CHARS) return over(`at most ${FILE_MAX_SCHEMA_CHARS} characters of schemas together`);
  let verdict: SchemaRefusal | null = null;
  try {
    const { instructions } = files.check(schema, SCHEMA_PARAM);
    if (files.instructions + instructions > FILE_MAX_SCHEMA_INSTRUCTIONS)
      return over(`their patterns expand to more than ${FILE_MAX_SCHEMA_INSTRUCTIONS} program instructions together`);
    files.instructions += instructions;
  } catch (err) {
    if (!(err instanceof SchemaRefusal)) throw err;
    verdict = err;
  }
  files.chars += text.length;
  files.verdicts.set(key, verdict);
  return verdict;
}

/**
 * Validates one line of a batch input file (1-based `line`). `seen` holds the custom_ids of
 * earlier lines and gains this one's when it is valid. Every failure names the line and the
 * parameter as OpenAI's `errors.data[]` does. `schemas`: the file's (newFileSchemas).
 */
export function validateOpenAiLine(
  text: string,
  line: number,
  ctx: { endpoint: string; seen: Set<string>; checkModel: ModelCheck; schemas: FileSchemas },
): LineResult {
  const fail = (code: string, message: string, param: string | null = null): LineResult => ({
    ok: false,
    error: { code, message: `Line ${line}: ${message}`, param, line },
  });
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return fail("invalid_json_line", "this line is not parseable as valid JSON.");
  }
  const parsed = lineSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issuePath(issue.path) || null;
    return fail("invalid_request", `${param ?? "line"}: ${issue.message}`, param);
  }
  const { custom_id: customId, method, url, body } = parsed.data;
  if (method !== "POST") return fail("invalid_method", `method must be POST, got ${JSON.stringify(method)}.`, "method");
  if (url !== ctx.endpoint)
    return fail("mismatched_url", `url ${JSON.stringify(url)} does not match the batch endpoint ${ctx.endpoint}.`, "url");
  if (ctx.seen.has(customId)) return fail("duplicate_custom_id", `custom_id ${JSON.stringify(customId)} is used twice.`, "custom_id");
  const bodyParsed = chatCompletionBodySchema.safeParse(body);
  if (!bodyParsed.success) {
    const issue = bodyParsed.error.issues[0]!;
    const param = ["body", ...issue.path.map(String)].join(".");
    return fail("invalid_body", `${param}: ${issue.message}`, param);
  }
  const schema = bodyParsed.data.response_format?.type === "json_schema" ? bodyParsed.data.response_format.json_schema.schema : null;
  const refusal = schema ? fileSchemaRefusal(schema, ctx.schemas) : null;
  if (refusal) return fail("invalid_body", refusal.message, refusal.field);
  const modelProblem = ctx.checkModel(bodyParsed.data.model);
  if (modelProblem) return fail("model_not_found", modelProblem, "body.model");
  ctx.seen.add(customId);
  return { ok: true, customId, request: normalizeChatBody(bodyParsed.data) };
}

/**
 * Splits a byte stream into lines (LF or CRLF; the last line may lack its newline) without
 * holding more than the current partial line. Blank lines are skipped but still counted.
 */
export async function* splitLines(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<{ line: number; text: string }> {
  const decoder = new TextDecoder("utf-8");
  let rest = "";
  let line = 0;
  const emit = function* (piece: string) {
    line++;
    const text = piece.endsWith("\r") ? piece.slice(0, -1) : piece;
    if (text.trim() !== "") yield { line, text };
  };
  for await (const chunk of chunks) {
    rest += decoder.decode(chunk, { stream: true });
    let start = 0;
    for (let nl = rest.indexOf("\n"); nl >= 0; nl = rest.indexOf("\n", start)) {
      yield* emit(rest.slice(start, nl));
      start = nl + 1;
    }
    rest = rest.slice(start);
  }
  rest += decoder.decode();
  if (rest !== "") yield* emit(rest);
}
