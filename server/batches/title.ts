/**
 * What a batch is called where people pick it out (the comparison, the review queue): batches
 * have no name, so the first line of the prompt template (else the sub-agent), cut to 80.
 */
export function batchTitle(b: { executionSpec: unknown; subagent: string }): string {
  const template = (b.executionSpec as { prompt_template?: unknown } | null)?.prompt_template;
  const text = typeof template === "string" && template.trim() ? template.trim() : b.subagent;
  const line = text.split("\n", 1)[0]!;
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}
