import type { BatchEstimate } from "@/lib/api/batches";
import { ASSUMED_OUTPUT_TOKENS } from "@/server/runtime/rate-limit";

/**
 * How many output tokens an estimate assumes an item writes (shown beside the estimate, so a
 * person can see what it rests on). With an output schema, the length of a typical answer of
 * that shape; else the definition's max_output_tokens; else a flat ASSUMED_OUTPUT_TOKENS.
 * max_output_tokens caps a schema's figure (the model cannot write more).
 */

/** A free-text string (no enum, const, format or maxLength): a sentence or two. */
const FREE_STRING_CHARS = 200;
/** An array without maxItems: a few items. */
const TYPICAL_ARRAY_ITEMS = 3;
/** Deeper than this (or a $ref), a value counts as a short free string. */
const MAX_DEPTH = 8;
/** ~4 characters a token, as the approximate counter reads text. */
const CHARS_PER_TOKEN = 4;

export type OutputAssumption = NonNullable<BatchEstimate["output_per_item"]>;

type Schema = Record<string, unknown>;
const isSchema = (v: unknown): v is Schema => v !== null && typeof v === "object" && !Array.isArray(v);
const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : undefined);

/** Characters of a typical JSON value of this schema (each string at its longest enum value, its maxLength up to a sentence, else a sentence). */
export function typicalJsonChars(schema: unknown, depth = 0): number {
  if (!isSchema(schema) || depth > MAX_DEPTH || "$ref" in schema) return FREE_STRING_CHARS + 2;
  if ("const" in schema) return JSON.stringify(schema.const ?? null).length;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return Math.max(...schema.enum.map((v) => JSON.stringify(v ?? null).length));
  const branches = [schema.anyOf, schema.oneOf].find((b): b is unknown[] => Array.isArray(b) && b.length > 0);
  if (branches) return Math.max(...branches.map((b) => typicalJsonChars(b, depth + 1)));
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type;
  switch (type) {
    case "object": {
      const properties = isSchema(schema.properties) ? Object.entries(schema.properties) : [];
      // {"key":value,...}: each key quoted with its colon and comma.
      return 2 + properties.reduce((sum, [key, value]) => sum + key.length + 4 + typicalJsonChars(value, depth + 1), 0);
    }
    case "array": {
      const items = Math.max(num(schema.minItems) ?? 0, Math.min(num(schema.maxItems) ?? TYPICAL_ARRAY_ITEMS, TYPICAL_ARRAY_ITEMS));
      return 2 + items * (typicalJsonChars(schema.items, depth + 1) + 1);
    }
    case "number":
    case "integer":
      return 6;
    case "boolean":
      return 5;
    case "null":
      return 4;
    default: {
      if (typeof schema.format === "string") return 27;
      const length = Math.max(num(schema.minLength) ?? 0, Math.min(num(schema.maxLength) ?? FREE_STRING_CHARS, FREE_STRING_CHARS));
      return length + 2;
    }
  }
}

/** The output tokens an item is assumed to write, and what the figure comes from. */
export function outputAssumption(outputSchema: unknown, maxOutputTokens: number | undefined): OutputAssumption {
  if (isSchema(outputSchema)) {
    const tokens = Math.max(1, Math.ceil(typicalJsonChars(outputSchema) / CHARS_PER_TOKEN));
    if (maxOutputTokens === undefined || tokens <= maxOutputTokens) return { tokens, from: "output_schema" };
  }
  if (maxOutputTokens !== undefined) return { tokens: maxOutputTokens, from: "max_output_tokens" };
  return { tokens: ASSUMED_OUTPUT_TOKENS, from: "default" };
}
