import { JUDGE_OUTPUT_NAME } from "@/lib/api/batch-data";
import { clip } from "./answers";
import { judgeFailReason, parseJsonDirective, stripDirectives } from "./directives";

/**
 * The simulator's JSON answers, when a call asks for a JSON response format:
 * - as a judge (the format is named JUDGE_OUTPUT_NAME): `{"score": 1, "reason": ...}`, or score 0
 *   with a reason when the call's text holds [[judge-fail]] (its REASON with [[judge-fail:REASON]]);
 *   every other directive is ignored;
 * - [[json:VALUE]] answers VALUE verbatim (valid or not, on purpose); [[json-once:VALUE]] only the
 *   first time this exact prompt is answered in this process (later answers and the repair turn
 *   are ordinary);
 * - with a schema: a deterministic value valid against it (schemaValue); with worked examples in
 *   the prompt (a batch's `examples`), each top-level enum property takes the value of the
 *   example whose input shares the most words with the item (a model that learns from them);
 * - without one: `{"answer": "<the usual answer>"}`.
 */

export type JsonFormat = { type: "json"; schema?: unknown; name?: string };

export const isJudgeFormat = (format: JsonFormat | undefined) => format?.name === JUDGE_OUTPUT_NAME;

export function judgeAnswer(texts: string[]): string {
  for (const text of texts) {
    const reason = judgeFailReason(text);
    if (reason === undefined) continue;
    return JSON.stringify({
      score: 0,
      reason: reason ?? "The answer does not meet the rubric (simulated: the item's prompt holds [[judge-fail]]).",
    });
  }
  return JSON.stringify({ score: 1, reason: "The answer meets the rubric (simulated judge)." });
}

/**
 * The JSON answer to an item's prompt (not a judge's): its [[json:...]] VALUE, a value valid
 * against the format's schema, or the usual answer wrapped. `onceUsed` holds the prompts whose
 * [[json-once:...]] was already answered (and gets this one).
 */
export function jsonAnswer(promptText: string, format: JsonFormat, usual: string, onceUsed: Set<string>): string {
  const directive = parseJsonDirective(withoutExamples(promptText));
  if (directive && !(directive.once && onceUsed.has(promptText))) {
    if (directive.once) onceUsed.add(promptText);
    return directive.value;
  }
  if (format.schema !== undefined) return JSON.stringify(withExampleLabels(schemaValue(format.schema, promptText), format.schema, promptText));
  return JSON.stringify({ answer: usual });
}

// ---------------------------------------------------------------------------------------------
// A value valid against a schema

type Schema = Record<string, unknown>;

const isSchema = (v: unknown): v is Schema => !!v && typeof v === "object" && !Array.isArray(v);
const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);

/** Past this depth objects carry only their required properties and arrays only minItems. */
const SHALLOW_DEPTH = 6;
/** Past this depth the value is null (a schema that recurses without end). */
const MAX_DEPTH = 32;
const STRING_CHARS = 80;

const FORMAT_VALUES: Record<string, string> = {
  email: "user@example.com",
  "idn-email": "user@example.com",
  date: "2024-01-01",
  time: "12:00:00Z",
  "date-time": "2024-01-01T12:00:00Z",
  duration: "P1D",
  uri: "https://example.com/",
  "uri-reference": "https://example.com/",
  iri: "https://example.com/",
  "iri-reference": "https://example.com/",
  url: "https://example.com/",
  hostname: "example.com",
  "idn-hostname": "example.com",
  ipv4: "192.0.2.1",
  ipv6: "2001:db8::1",
  uuid: "00000000-0000-4000-8000-000000000000",
  "json-pointer": "/a",
  "relative-json-pointer": "0",
  regex: "a",
  byte: "YQ==",
};

interface Ctx {
  root: Schema;
  /** The prompt's text, without directives, on one line. */
  text: string;
}

/** The value at a local `$ref` ("#", "#/$defs/x", "#/definitions/x", any JSON Pointer into the root). */
function resolveRef(ref: string, root: Schema): Schema | undefined {
  if (!ref.startsWith("#")) return undefined;
  let at: unknown = root;
  for (const raw of ref.slice(1).split("/").slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    at = isSchema(at) || Array.isArray(at) ? (at as Record<string, unknown>)[key] : undefined;
  }
  return isSchema(at) ? at : undefined;
}

/** Two schemas as one (a $ref or a branch with its siblings): properties and required merged. */
function merge(a: Schema, b: Schema): Schema {
  const out: Schema = { ...a, ...b };
  if (isSchema(a.properties) && isSchema(b.properties)) out.properties = { ...a.properties, ...b.properties };
  if (Array.isArray(a.required) && Array.isArray(b.required)) out.required = [...new Set([...a.required, ...b.required])];
  return out;
}

/** The schema with $ref, allOf and the first anyOf / oneOf branch folded in. */
function flatten(schema: Schema, ctx: Ctx, depth: number): Schema {
  // `{ allOf: [{ $ref: "#" }] }` would fold itself in forever.
  if (depth > MAX_DEPTH) return {};
  let s = schema;
  for (let i = 0; i < MAX_DEPTH; i++) {
    const { $ref, allOf, anyOf, oneOf, ...rest } = s;
    if (typeof $ref === "string") {
      const target = resolveRef($ref, ctx.root);
      s = target ? merge(target, rest) : rest;
      if (allOf || anyOf || oneOf) s = { ...s, ...(allOf ? { allOf } : {}), ...(anyOf ? { anyOf } : {}), ...(oneOf ? { oneOf } : {}) };
      continue;
    }
    if (Array.isArray(allOf)) {
      s = allOf.filter(isSchema).reduce((acc, part) => merge(acc, flatten(part, ctx, depth + 1)), rest as Schema);
      if (anyOf || oneOf) s = { ...s, ...(anyOf ? { anyOf } : {}), ...(oneOf ? { oneOf } : {}) };
      continue;
    }
    const branch = [anyOf, oneOf].find(Array.isArray)?.find(isSchema);
    if (branch) {
      s = merge(rest, branch);
      if (anyOf && oneOf) s = { ...s, oneOf };
      continue;
    }
    return rest;
  }
  return {};
}

function typeOf(s: Schema): string {
  const t = s.type;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) return (t.find((x) => x !== "null") ?? t[0] ?? "string") as string;
  if (isSchema(s.properties) || Array.isArray(s.required)) return "object";
  if (s.items !== undefined || Array.isArray(s.prefixItems)) return "array";
  if (num(s.minimum) !== undefined || num(s.maximum) !== undefined) return "number";
  return "string";
}

function numberValue(s: Schema, integer: boolean, variant: number): number {
  const min = num(s.minimum);
  const max = num(s.maximum);
  const exMin = num(s.exclusiveMinimum);
  const exMax = num(s.exclusiveMaximum);
  const step = num(s.multipleOf);
  let v = (min ?? 0) + variant;
  if (exMin !== undefined && v <= exMin) v = integer ? Math.floor(exMin) + 1 : exMin + 1;
  if (max !== undefined && v > max) v = max;
  // Just under an exclusive maximum: the next integer down, or halfway from the lower bound.
  if (exMax !== undefined && v >= exMax) v = integer ? Math.ceil(exMax) - 1 : (exMax + (exMin ?? min ?? exMax - 2)) / 2;
  if (integer) v = Math.ceil(v);
  if (step && step > 0) v = Math.ceil(v / step) * step;
  return v;
}

/** Counted in code points, as JSON Schema counts minLength and maxLength. */
function stringValue(s: Schema, ctx: Ctx, variant: number): string {
  const format = typeof s.format === "string" ? FORMAT_VALUES[s.format] : undefined;
  if (format) return format;
  const base = ctx.text || "simulated";
  const minLength = num(s.minLength) ?? 0;
  const limit = Math.max(minLength, Math.min(STRING_CHARS, num(s.maxLength) ?? STRING_CHARS));
  // Items of a uniqueItems array differ by a suffix.
  const suffix = variant > 0 ? ` ${variant + 1}` : "";
  let chars = Array.from(clip(base, Math.max(1, limit - suffix.length)) + suffix);
  while (chars.length < minLength) chars = chars.concat(Array.from(` ${base}`));
  return chars.slice(0, limit).join("");
}

function value(schema: unknown, ctx: Ctx, depth: number, variant: number): unknown {
  if (schema === false || depth > MAX_DEPTH) return null;
  if (!isSchema(schema)) return stringValue({}, ctx, variant);
  const s = flatten(schema, ctx, depth);
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[variant % s.enum.length];
  const shallow = depth >= SHALLOW_DEPTH;
  switch (typeOf(s)) {
    case "null":
      return null;
    case "boolean":
      return variant % 2 === 0;
    case "integer":
      return numberValue(s, true, variant);
    case "number":
      return numberValue(s, false, variant);
    case "array": {
      const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : [];
      const rest = Array.isArray(s.items) ? s.additionalItems : s.items;
      const minItems = num(s.minItems) ?? 0;
      const maxItems = num(s.maxItems) ?? Number.POSITIVE_INFINITY;
      const count = Math.min(maxItems, Math.max(minItems, shallow ? 0 : Math.max(1, prefix.length)));
      const out: unknown[] = [];
      for (let i = 0; i < count; i++) {
        const item = i < prefix.length ? prefix[i] : rest === undefined || rest === true ? {} : rest;
        if (item === false) break;
        out.push(value(item, ctx, depth + 1, s.uniqueItems ? i : 0));
      }
      return out;
    }
    case "object": {
      const properties = isSchema(s.properties) ? s.properties : {};
      const required = new Set(Array.isArray(s.required) ? s.required.filter((k) => typeof k === "string") : []);
      const out: Record<string, unknown> = {};
      for (const [key, sub] of Object.entries(properties)) {
        if (shallow && !required.has(key)) continue;
        out[key] = value(sub, ctx, depth + 1, 0);
      }
      const extra = isSchema(s.additionalProperties) ? s.additionalProperties : {};
      for (const key of required) if (!(key in out)) out[key] = value(extra, ctx, depth + 1, 0);
      return out;
    }
    default:
      return stringValue(s, ctx, variant);
  }
}

/**
 * A deterministic value valid against `schema`: the first enum value (or const), strings drawn
 * from the prompt's text (within minLength / maxLength; known formats get a fixed example),
 * numbers at their minimum or 0 within the bounds, booleans true, arrays of at least one item
 * (minItems), every property of an object, the first anyOf / oneOf branch, local $refs resolved,
 * and bounded recursion. Patterns, `not` and conditionals are not attempted.
 */
export function schemaValue(schema: unknown, promptText: string): unknown {
  const text = stripDirectives(promptText).replace(/\s+/g, " ").trim();
  return value(schema, { root: isSchema(schema) ? schema : {}, text }, 0, 0);
}

// ---------------------------------------------------------------------------------------------
// Worked examples

/** The delimiter lines of a batch's examples block (server/batches/examples.ts, quote-data.ts). */
const EXAMPLES_BEGIN = "BEGIN EXAMPLES";
const EXAMPLES_END = "END EXAMPLES";

/**
 * The text without its examples block: the examples are other items' data, so a directive quoted
 * in one of them ([[json:...]], [[fail]]) must not act on this item.
 */
export function withoutExamples(text: string): string {
  const begin = text.indexOf(`${EXAMPLES_BEGIN}\n`);
  if (begin < 0) return text;
  const end = text.indexOf(`\n${EXAMPLES_END}`, begin);
  return end < 0 ? text : text.slice(0, begin) + text.slice(end + EXAMPLES_END.length + 1);
}

/** Words of three letters or more, lower case: what "similar" means to the simulator. */
function words(text: string): Set<string> {
  return new Set(text.toLowerCase().match(/[\p{L}\p{N}]{3,}/gu) ?? []);
}

const inputText = (input: unknown): string =>
  typeof input === "string" ? input : isSchema(input) ? Object.values(input).map((v) => (typeof v === "string" ? v : JSON.stringify(v))).join(" ") : "";

/**
 * The answer of the worked example (a batch's `examples`: one `{"input", "answer"}` line each
 * between BEGIN EXAMPLES and END EXAMPLES) whose input shares the most words with the prompt
 * after the block; undefined without examples or when none shares a word.
 */
export function nearestExampleAnswer(promptText: string): unknown {
  const lines = promptText.split("\n");
  const begin = lines.indexOf(EXAMPLES_BEGIN);
  const end = begin < 0 ? -1 : lines.indexOf(EXAMPLES_END, begin + 1);
  if (end < 0) return undefined;
  const item = words(lines.slice(end + 1).join(" "));
  let best: { score: number; answer: unknown } | undefined;
  for (const line of lines.slice(begin + 1, end)) {
    let example: unknown;
    try {
      example = JSON.parse(line);
    } catch {
      continue;
    }
    if (!isSchema(example)) continue;
    let score = 0;
    for (const w of words(inputText(example.input))) if (item.has(w)) score++;
    if (score > 0 && (!best || score > best.score)) best = { score, answer: example.answer };
  }
  return best?.answer;
}

/**
 * A schema value as a model that learns from its examples would give it: each top-level property
 * with an `enum` takes the nearest example's value for it (when that value is one of the enum's).
 */
function withExampleLabels(value: unknown, schema: unknown, promptText: string): unknown {
  if (!isSchema(value) || !isSchema(schema) || !isSchema(schema.properties)) return value;
  const answer = nearestExampleAnswer(promptText);
  if (!isSchema(answer)) return value;
  const out: Record<string, unknown> = { ...value };
  for (const [key, sub] of Object.entries(schema.properties))
    if (isSchema(sub) && Array.isArray(sub.enum) && key in answer && sub.enum.some((e) => JSON.stringify(e) === JSON.stringify(answer[key]))) out[key] = answer[key];
  return out;
}
