import type { z } from "zod";
import { type Check, checksSchema, type OutputSchema, outputSchemaSchema } from "@/lib/api/batch-data";

/**
 * The New batch dialog's "Output schema" and "Checks" fields: JSON text read with the wire
 * schemas, so a typo is named before anything is sent (whether the schema compiles and the
 * patterns parse is typed-compile.ts's, loaded on demand). An empty field sends nothing.
 * Problems name the field as the dialog labels it: "Output schema: …", "Check 2 pattern: …".
 */

/**
 * A server locator as the dialog's words: `output_schema.properties.code.pattern` → "Output
 * schema properties.code.pattern", `checks.1.pattern` → "Check 2 pattern", `checks` → "Checks".
 */
export function fieldLabel(locator: string): string {
  if (locator === "output_schema") return "Output schema";
  if (locator.startsWith("output_schema")) return `Output schema ${locator.slice("output_schema".length).replace(/^\./, "")}`;
  const check = /^checks\.(\d+)(?:\.(.*))?$/.exec(locator);
  if (check) return `Check ${Number(check[1]) + 1}${check[2] ? ` ${check[2]}` : ""}`;
  if (locator === "checks") return "Checks";
  return locator;
}

/** `<label>: message` for a problem at `locator`. */
export const labelled = (locator: string, message: string) => `${fieldLabel(locator)}: ${message}`;

/** A server refusal "checks.1.model: …" in the dialog's words ("Check 2 model: …"); others as they are. */
export function relabelServerMessage(message: string): string {
  const m = /^((?:output_schema|checks)\S*): ([\s\S]*)$/.exec(message);
  return m ? labelled(m[1], m[2]) : message;
}

export type Parsed<T> = { value: T | undefined; error: null } | { value: undefined; error: string };

function parseJson(text: string, field: string): { json: unknown; error: null } | { json: undefined; error: string } {
  try {
    return { json: JSON.parse(text), error: null };
  } catch (err) {
    return { json: undefined, error: labelled(field, `not valid JSON (${(err as Error).message})`) };
  }
}

/** The first issue, labelled by where it is (the server's locator, in the dialog's words). */
function firstIssue(error: z.ZodError, field: string): string {
  const issue = error.issues[0];
  return labelled([field, ...issue.path.map(String)].join("."), issue.message);
}

export function parseOutputSchemaText(text: string): Parsed<OutputSchema> {
  if (text.trim() === "") return { value: undefined, error: null };
  const parsed = parseJson(text, "output_schema");
  if (parsed.error !== null) return { value: undefined, error: parsed.error };
  if (parsed.json === null || typeof parsed.json !== "object" || Array.isArray(parsed.json))
    return { value: undefined, error: labelled("output_schema", "must be a JSON Schema object") };
  const r = outputSchemaSchema.safeParse(parsed.json);
  return r.success ? { value: r.data, error: null } : { value: undefined, error: firstIssue(r.error, "output_schema") };
}

export function parseChecksText(text: string): Parsed<Check[]> {
  if (text.trim() === "") return { value: undefined, error: null };
  const parsed = parseJson(text, "checks");
  if (parsed.error !== null) return { value: undefined, error: parsed.error };
  if (!Array.isArray(parsed.json)) return { value: undefined, error: labelled("checks", "must be an array of checks") };
  const r = checksSchema.safeParse(parsed.json);
  return r.success ? { value: r.data, error: null } : { value: undefined, error: firstIssue(r.error, "checks") };
}

/** A starting point for each field (the placeholders show them). */
export const OUTPUT_SCHEMA_EXAMPLE = '{"type":"object","properties":{"label":{"type":"string","enum":["positive","negative"]}},"required":["label"]}';
export const CHECKS_EXAMPLE = '[{"name":"label_matches","type":"equals","path":"/label"}]';
