import { jsonSchema, type ModelMessage, Output } from "ai";
import { repairOptions } from "@/lib/api/model-facts";
import type { OutputSchema } from "@/lib/api/batch-data";
import { type PreparedSchema, prepareOutputSchema, validateAnswer } from "@/server/runtime/output-schema";

/**
 * Typed answers of a sub-agent whose definition has an output schema: the response format the
 * model is asked for (the provider's JSON-schema mode), the system prompt's statement of the
 * schema (for providers that ignore the format), reading and validating the answer (Ajv), and
 * the one repair turn's request.
 */

export interface TypedOutput {
  schema: PreparedSchema;
  /** For generateText's `output`: sends `responseFormat { type: "json", schema }` on every step. */
  output: ReturnType<typeof Output.object>;
  /** Appended to the definition's system prompt. */
  instructions: string;
}

// Per schema object: a batch's items share their spec's definition, so each item costs a lookup.
// The validator is not kept here: a worker keeps a thousand specs, and each validator keeps its
// Ajv generation (server/runtime/output-schema.ts) alive; its cache decides what stays compiled.
const bySchema = new WeakMap<OutputSchema, Omit<TypedOutput, "schema">>();

/** Throws `validation_failed` "output_schema: ..." when the schema is refused (output-schema.ts). */
export function typedOutput(schema: OutputSchema): TypedOutput {
  const prepared = prepareOutputSchema(schema);
  let typed = bySchema.get(schema);
  if (!typed) {
    typed = build(schema);
    bySchema.set(schema, typed);
  }
  return { ...typed, schema: prepared };
}

function build(schema: OutputSchema): Omit<TypedOutput, "schema"> {
  return {
    // No `validate` on the AI SDK's schema: the SDK only parses, Ajv judges (one validator).
    output: Output.object({ schema: jsonSchema(schema) }),
    instructions:
      "Your final answer (after any tool calls) must be exactly one JSON value, with no other text, " +
      `valid against this JSON Schema:\n${JSON.stringify(schema)}`,
  };
}

/** `final`: no repair turn (the schema took too long to check this answer). */
export type TypedAnswer = { ok: true; value: unknown } | { ok: false; errors: string; final?: boolean };

/** A JSON answer some models wrap in a Markdown code fence anyway. */
const FENCE = /^```[A-Za-z]*\s*\n([\s\S]*?)\n?```$/;

/**
 * The answer text as one JSON value valid against the schema, or the validator's errors (a
 * large answer is checked in the matching thread within its time limit: output-schema.ts;
 * `label` names the schema in a timeout's reason).
 */
export async function readTypedAnswer(text: string, schema: PreparedSchema, label?: string): Promise<TypedAnswer> {
  const trimmed = text.trim();
  if (!trimmed) return { ok: false, errors: "/ the answer is empty: expected one JSON value" };
  const json = FENCE.exec(trimmed)?.[1] ?? trimmed;
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (err) {
    const why = err instanceof Error ? err.message.slice(0, 200) : "parse error";
    return { ok: false, errors: `/ the answer is not valid JSON (${why})` };
  }
  let checked: Awaited<ReturnType<typeof validateAnswer>>;
  try {
    checked = await validateAnswer(schema, json, value, label);
  } catch (err) {
    // Deeper than the stack (a schema older than the evaluation budget that refers to itself).
    return { ok: false, errors: `/ could not be checked against the schema (${err instanceof Error ? err.message : "error"})` };
  }
  if (checked.ok) return { ok: true, value };
  return { ok: false, errors: checked.errors, ...(checked.timedOut ? { final: true } : {}) };
}

/** The repair turn's request, quoting the validator's errors (marked for the simulator). */
export function repairRequest(errors: string): ModelMessage {
  return {
    role: "user",
    content: [
      {
        type: "text",
        text:
          `Your answer is not valid against the required JSON Schema: ${errors}\n` +
          "Answer again with only the corrected JSON value, nothing else.",
        providerOptions: repairOptions(),
      },
    ],
  };
}
