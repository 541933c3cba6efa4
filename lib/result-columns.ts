/**
 * The columns of a batch's results (the panel's Results table; the same naming as results.csv):
 * the object items' input fields, the output schema's top-level properties (an output column is
 * prefixed `output.` when an input field has the same name), one column per check. Pure and
 * client-safe.
 */

export interface ResultColumns {
  /** Input field names; empty for string items (one "Input" column). */
  input: string[];
  /** Output columns: the property each reads and the header it shows; empty without a schema (one "Result" column). */
  output: { field: string; header: string }[];
  /** Check names, in the batch's order. */
  checks: string[];
}

export function resultColumns(batch: {
  input_fields: readonly string[];
  output_fields: readonly string[];
  checks: readonly { name: string }[];
}): ResultColumns {
  const inputs = new Set(batch.input_fields);
  return {
    input: [...batch.input_fields],
    output: batch.output_fields.map((field) => ({ field, header: inputs.has(field) ? `output.${field}` : field })),
    checks: batch.checks.map((c) => c.name),
  };
}

/** A value as one cell: strings as they are, nothing as empty, anything else as compact JSON. */
export function cellText(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  return JSON.stringify(value);
}

/**
 * An object item's fields, read back from its `input` (compact JSON of the fields). Null when
 * the input is not a JSON object, e.g. cut to the projection's length.
 */
export function inputFields(input: string): Record<string, unknown> | null {
  if (!input.startsWith("{")) return null;
  try {
    const value: unknown = JSON.parse(input);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** The value of one output column, or undefined when the output is not an object holding it. */
export function outputField(output: unknown, field: string): unknown {
  if (output === null || typeof output !== "object" || Array.isArray(output)) return undefined;
  return Object.hasOwn(output, field) ? (output as Record<string, unknown>)[field] : undefined;
}

/** How long an item took: from its start to its finish (null until it finished). */
export function itemDurationMs(item: { started_at: string | null; finished_at: string | null }): number | null {
  if (!item.started_at || !item.finished_at) return null;
  const ms = Date.parse(item.finished_at) - Date.parse(item.started_at);
  return Number.isFinite(ms) && ms >= 0 ? ms : null;
}
