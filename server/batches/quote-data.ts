/**
 * Text a model or a person handed us, put in front of another model as data (DESIGN.md "Holding
 * under abuse (third round)"): what a judge grades, and a failed check's reason in a retry prompt.
 * The value goes in as one line of JSON between a BEGIN and an END line. JSON escapes quotes and
 * line breaks, and the line separators JSON leaves raw are escaped here too, so nothing inside
 * can end the line, close the block early or add a line of its own: only the code that builds the
 * prompt writes delimiter lines.
 */

/** JSON on one line: JSON.stringify, plus the line separators (NEL, U+2028, U+2029) it leaves raw. */
export function quoteAsData(value: unknown): string {
  return (JSON.stringify(value) ?? "null").replace(/[\u0085\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** The delimiter lines of a block named `name` (upper case: "DATA", "FEEDBACK"). */
export function blockLines(name: string): { begin: string; end: string } {
  return { begin: `BEGIN ${name}`, end: `END ${name}` };
}

/** A block: its BEGIN line, the value as one line of JSON, its END line. */
export function dataBlock(name: string, value: unknown): string {
  const { begin, end } = blockLines(name);
  return `${begin}\n${quoteAsData(value)}\n${end}`;
}
