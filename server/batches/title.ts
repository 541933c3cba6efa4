import { titleFrom } from "@/lib/batch-title";

/** A batch's title from its spec's prompt template, else its sub-agent (`lib/batch-title.ts`, which the browser uses too). */
export function batchTitle(b: { executionSpec: unknown; subagent: string }): string {
  const template = (b.executionSpec as { prompt_template?: unknown } | null)?.prompt_template;
  return titleFrom(typeof template === "string" ? template : null, b.subagent);
}
