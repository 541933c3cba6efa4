/**
 * What a batch is called where people pick it out (the comparison, the review queue, the
 * variant dialog): batches have no name, so the first line of the prompt template (else the
 * sub-agent), cut to 80.
 */
export function titleFrom(template: string | null | undefined, subagent: string): string {
  const text = typeof template === "string" && template.trim() ? template.trim() : subagent;
  const line = text.split("\n", 1)[0]!;
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}
