import type { Check, OutputSchema } from "@/lib/api/batch-data";
import type { SubmitBatchInput } from "@/lib/api/batches";
import { fieldTemplate, ITEM_PLACEHOLDER, PROMPT_TEMPLATE_MAX_CHARS } from "@/lib/batch-rules";
import { type DraftItem, draftPrompt } from "./items-input";

/** Turns a dialog draft into the JSON submission, or the first problem the server would report. */

export interface SubmissionDraft {
  submissionKey: string;
  subagent?: string;
  template: string;
  items: DraftItem[];
  maxLiveItems?: number;
  maxRunningItems?: number;
  /** Object items' field names (a CSV header's, or the JSONL objects'). */
  fields?: string[];
  outputSchema?: OutputSchema;
  checks?: Check[];
}

/** An object item's fields by name as `{{name}}` placeholders, for messages. */
const placeholders = (names: string[]) => names.map((n) => `{{${n}}}`).join(", ");

/** An object item's template names only its fields, and at least one. */
function objectTemplateError(template: string, fields: string[]): string | null {
  const names = [...fieldTemplate(template).slots.keys()];
  const unknown = names.filter((n) => !fields.includes(n));
  if (unknown.length > 0)
    return `The prompt template names ${placeholders(unknown)}, which ${unknown.length === 1 ? "is not a field" : "are not fields"} of the items (their fields: ${placeholders(fields)}).`;
  if (names.length === 0) return `The prompt template must contain a field, such as ${placeholders(fields.slice(0, 1))}.`;
  return null;
}

/**
 * Builds the JSON submission, or the first problem the server would report. Plain values
 * travel as strings with the template (so the body stays small); keyed values are expanded
 * here because the server's string items carry no key.
 */
export function buildSubmission(
  d: SubmissionDraft,
  limits: { maxItems: number; maxLiveItems: number; maxRunningItems: number },
): { body: SubmitBatchInput; error: null } | { body: null; error: string } {
  if (d.items.length === 0) return { body: null, error: "Add at least one item." };
  if (d.items.length > limits.maxItems)
    return { body: null, error: `At most ${limits.maxItems} items per batch (got ${d.items.length}).` };
  const usesValues = d.items.some((i) => i.kind === "value");
  if (usesValues && !d.template.includes(ITEM_PLACEHOLDER))
    return { body: null, error: `The prompt template must contain ${ITEM_PLACEHOLDER}.` };
  const usesFields = d.items.some((i) => i.kind === "object");
  const fieldsError = usesFields ? objectTemplateError(d.template, d.fields ?? []) : null;
  if (fieldsError) return { body: null, error: fieldsError };
  if (d.template.length > PROMPT_TEMPLATE_MAX_CHARS)
    return { body: null, error: `The prompt template must be at most ${PROMPT_TEMPLATE_MAX_CHARS} characters.` };
  for (const [name, value, max] of [
    ["Max live items", d.maxLiveItems, limits.maxLiveItems],
    ["Max running items", d.maxRunningItems, limits.maxRunningItems],
  ] as const) {
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value < 1 || value > max)
      return { body: null, error: `${name} must be a whole number from 1 to ${max}.` };
  }
  const seen = new Map<string, number>();
  const items: SubmitBatchInput["items"] = [];
  for (let i = 0; i < d.items.length; i++) {
    const item = d.items[i];
    const key = item.key ?? `item-${i + 1}`;
    const first = seen.get(key);
    if (first !== undefined)
      return { body: null, error: `Item ${i + 1}: duplicate key "${key}" (first used by item ${first + 1}).` };
    seen.set(key, i);
    const keyed = item.key !== undefined ? { item_key: item.key } : {};
    if (item.kind === "value" && item.key === undefined) items.push(item.value);
    // Object items travel as fields: the server fills the template and keeps `expected` from the prompt.
    else if (item.kind === "object")
      items.push({ ...keyed, ...item.fields, ...(item.expected !== undefined ? { expected: item.expected } : {}) });
    else items.push({ ...keyed, prompt: draftPrompt(item, d.template) });
  }
  const body: SubmitBatchInput = { submission_key: d.submissionKey, items };
  if (d.subagent) body.subagent = d.subagent;
  if (usesFields || (usesValues && items.some((i) => typeof i === "string"))) body.prompt_template = d.template;
  if (d.outputSchema !== undefined) body.output_schema = d.outputSchema;
  if (d.checks !== undefined && d.checks.length > 0) body.checks = d.checks;
  if (d.maxLiveItems !== undefined) body.max_live_items = d.maxLiveItems;
  if (d.maxRunningItems !== undefined) body.max_running_items = d.maxRunningItems;
  return { body, error: null };
}

/** A fresh idempotency key per dialog submission (randomUUID is missing outside secure contexts). */
export function newSubmissionKey(): string {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === "function") return `panel:${c.randomUUID()}`;
  const bytes = new Uint8Array(16);
  c.getRandomValues(bytes);
  return `panel:${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}
