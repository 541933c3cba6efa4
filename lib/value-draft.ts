/**
 * A value a person edits in a text box (a review's corrected output, a retried item's input):
 * JSON, indented, when the value is structured, else the text itself; read back the same way.
 * Pure and client-safe.
 */

/** The editor's starting text: JSON for a structured value, else the text (nothing as empty). */
export function draftText(value: unknown, json: boolean): string {
  if (!json) return typeof value === "string" ? value : value === null || value === undefined ? "" : JSON.stringify(value);
  return JSON.stringify(value ?? null, null, 2);
}

/** The edited text as the value to send, or why it is not one, naming the field as the server would. */
export function parseDraft(text: string, json: boolean, field: string): { value: unknown } | { error: string } {
  if (!json) return { value: text };
  try {
    return { value: JSON.parse(text) };
  } catch (err) {
    return { error: `${field}: not valid JSON (${(err as Error).message})` };
  }
}
