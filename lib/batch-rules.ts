/**
 * The rules every batch submission obeys, whatever its door (JSON, NDJSON, files, the
 * batch_task tool, the New batch dialog, the compatible /v1 APIs). The server's one writer
 * (server/batches/submit.ts) applies them; the dialog checks its input with them before sending.
 * Pure and client-safe. A problem names the item by index and the field; each door renders it
 * with its own locator (`items.3.prompt`, `line 4: prompt`, ...), so the `<field>: <message>`
 * part reads the same from every door.
 */

export const SUBMISSION_KEY_MAX_CHARS = 200;
export const ITEM_KEY_MAX_CHARS = 200;
export const SUBAGENT_NAME_MAX_CHARS = 40;
export const PROMPT_TEMPLATE_MAX_CHARS = 20_000;
/** Longest prompt one item may carry after its template is filled. */
export const ITEM_PROMPT_MAX_CHARS = 100_000;
export const GLOB_MAX_CHARS = 512;
export const MAX_COST_USD = 1_000_000_000;
export const ITEM_PLACEHOLDER = "{{item}}";
export const FILE_PLACEHOLDER = "{{file}}";

/** The configured bounds a submission is checked against (from subagent_batches.*). */
export interface SubmissionLimits {
  maxItems: number;
  maxLiveItems: number;
  maxRunningItems: number;
  /** subagent_batches.max_total_prompt_chars (the dialog reads it from /api/features). */
  maxTotalPromptChars: number;
}

export function submissionLimits(batches: {
  max_items_per_batch: number;
  max_live_items_per_batch: number;
  max_running_items_per_batch: number;
  max_total_prompt_chars: number;
}): SubmissionLimits {
  return {
    maxItems: batches.max_items_per_batch,
    maxLiveItems: batches.max_live_items_per_batch,
    maxRunningItems: batches.max_running_items_per_batch,
    maxTotalPromptChars: batches.max_total_prompt_chars,
  };
}

/** One item as submitted: a value for the template's {{item}}, or an explicit prompt with an optional key. */
export type SubmitItem = string | { item_key?: string; prompt: string };

/**
 * Why a submission is refused. `item` is the item's index (the door names it); `field` is
 * relative to the item when `item` is set, else a top-level field; `firstItem` is the index of
 * the item a duplicate key was first used by. `tooLarge`: answered 413, not 400.
 */
export interface Problem {
  item?: number;
  field?: string;
  message: string;
  firstItem?: number;
  tooLarge?: boolean;
}

/** How a door names an item (and a field of it) in its own envelope. */
export interface Locator {
  item(index: number): string;
  field(index: number, field: string): string;
}

/** JSON bodies and tool arguments: the JSON path (`items.3`, `items.3.prompt`). */
export const jsonLocator: Locator = {
  item: (i) => `items.${i}`,
  field: (i, f) => `items.${i}.${f}`,
};

/** Line-oriented uploads: `line 4`, `line 4: prompt`; `lineOf[index]` is the item's 1-based line. */
export function lineLocator(lineOf: readonly number[], word = "line"): Locator {
  const at = (i: number) => `${word} ${lineOf[i] ?? i + 1}`;
  return { item: at, field: (i, f) => `${at(i)}: ${f}` };
}

/** `<locator>: <field>: <message>` (the locator and field as the door names them). */
export function problemText(p: Problem, locator: Locator = jsonLocator): string {
  const where =
    p.item === undefined ? p.field : p.field === undefined ? locator.item(p.item) : locator.field(p.item, p.field);
  const first = p.firstItem === undefined ? "" : ` (first used by ${locator.item(p.firstItem)})`;
  return `${where ? `${where}: ` : ""}${p.message}${first}`;
}

export function countOccurrences(text: string, needle: string): number {
  let n = 0;
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + needle.length)) n++;
  return n;
}

/** The shape of a template: its length without placeholders, and how many placeholders it has. */
export interface TemplateShape {
  fixed: number;
  slots: number;
}

export function templateShape(template: string, placeholder: string): TemplateShape {
  const slots = countOccurrences(template, placeholder);
  return { fixed: template.length - slots * placeholder.length, slots };
}

/** Length of the template filled with a value of `valueLength` characters, computed, never built. */
export function filledLength(shape: TemplateShape, valueLength: number): number {
  return shape.fixed + shape.slots * valueLength;
}

/** Every occurrence of the placeholder replaced by the value (only after the bounds held). */
export function fillTemplate(template: string, placeholder: string, value: string): string {
  return template.split(placeholder).join(value);
}

/** Structural check of one item value: a non-empty string or a strict {item_key?, prompt} object. */
export function parseItem(value: unknown, index: number): SubmitItem | Problem {
  if (typeof value === "string") {
    if (value.length === 0) return { item: index, message: "must not be empty" };
    return value;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    return { item: index, message: "expected a string or an object {item_key?, prompt}" };
  const o = value as Record<string, unknown>;
  const unknown = Object.keys(o).find((k) => k !== "item_key" && k !== "prompt");
  if (unknown !== undefined) return { item: index, message: `unrecognized key "${unknown}" (an item has item_key and prompt)` };
  if (o.item_key !== undefined && typeof o.item_key !== "string")
    return { item: index, field: "item_key", message: "must be a string" };
  if (typeof o.prompt !== "string") return { item: index, field: "prompt", message: "must be a string" };
  return o.item_key === undefined ? { prompt: o.prompt } : { item_key: o.item_key, prompt: o.prompt };
}

export function isProblem(value: unknown): value is Problem {
  return typeof value === "object" && value !== null && "message" in value && typeof value.message === "string";
}

/** The key an item gets: its explicit item_key, else item-1, item-2, ... by position. */
export function itemKey(item: SubmitItem, index: number): string {
  return typeof item === "string" || item.item_key === undefined ? `item-${index + 1}` : item.item_key;
}

/** item_key rules, for explicit keys and file paths alike. */
export function keyProblem(key: string, index: number): Problem | null {
  if (key.length === 0) return { item: index, field: "item_key", message: "must not be empty" };
  if (key.length > ITEM_KEY_MAX_CHARS)
    return { item: index, field: "item_key", message: `must be at most ${ITEM_KEY_MAX_CHARS} characters` };
  return null;
}

/** The live and running windows within the configured ceilings. */
export function windowProblem(
  input: { max_live_items?: number; max_running_items?: number },
  limits: Pick<SubmissionLimits, "maxLiveItems" | "maxRunningItems">,
): Problem | null {
  for (const [field, value, max] of [
    ["max_live_items", input.max_live_items, limits.maxLiveItems],
    ["max_running_items", input.max_running_items, limits.maxRunningItems],
  ] as const) {
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value < 1) return { field, message: "must be a positive whole number" };
    if (value > max) return { field, message: `must be at most ${max}` };
  }
  return null;
}

/** A prompt template: bounded, and holding its placeholder. */
export function templateProblem(template: string | undefined, placeholder: string): Problem | null {
  if (template === undefined) return null;
  if (template.length === 0) return { field: "prompt_template", message: "must not be empty" };
  if (template.length > PROMPT_TEMPLATE_MAX_CHARS)
    return { field: "prompt_template", message: `must be at most ${PROMPT_TEMPLATE_MAX_CHARS} characters` };
  if (!template.includes(placeholder)) return { field: "prompt_template", message: `must contain ${placeholder}` };
  return null;
}

function totalProblem(total: number, limits: SubmissionLimits, field: string): Problem | null {
  if (total <= limits.maxTotalPromptChars) return null;
  return {
    field,
    message: `the expanded prompts would total ${total} characters; at most ${limits.maxTotalPromptChars} per batch (subagent_batches.max_total_prompt_chars)`,
    tooLarge: true,
  };
}

function promptLengthProblem(length: number, index: number): Problem | null {
  if (length === 0) return { item: index, field: "prompt", message: "must not be empty" };
  if (length > ITEM_PROMPT_MAX_CHARS)
    return { item: index, message: `prompt is ${length} characters; at most ${ITEM_PROMPT_MAX_CHARS} per item` };
  return null;
}

/**
 * The items' rules, from lengths alone (nothing is expanded): count, keys (bounded, unique),
 * the template's {{item}}, each prompt's length and the batch's total. The first problem, or null.
 */
export function itemsProblem(items: readonly SubmitItem[], template: string | undefined, limits: SubmissionLimits): Problem | null {
  if (items.length === 0) return { field: "items", message: "must contain at least one item" };
  if (items.length > limits.maxItems)
    return { field: "items", message: `at most ${limits.maxItems} items per batch (got ${items.length})` };
  const templateIssue = templateProblem(template, ITEM_PLACEHOLDER);
  if (templateIssue) return templateIssue;
  const shape = template === undefined ? { fixed: 0, slots: 1 } : templateShape(template, ITEM_PLACEHOLDER);
  const seen = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    if (typeof item !== "string") {
      const keyIssue = item.item_key === undefined ? null : keyProblem(item.item_key, i);
      if (keyIssue) return keyIssue;
    }
    const key = itemKey(item, i);
    const first = seen.get(key);
    if (first !== undefined) return { item: i, message: `duplicate item_key "${key}"`, firstItem: first };
    seen.set(key, i);
    if (typeof item === "string" && item.length === 0) return { item: i, message: "must not be empty" };
    const length = typeof item === "string" ? filledLength(shape, item.length) : item.prompt.length;
    const lengthIssue = promptLengthProblem(length, i);
    if (lengthIssue) return lengthIssue;
    total += length;
  }
  return totalProblem(total, limits, "items");
}

/**
 * A batch over files: one item per path, keyed by it, {{file}} filled with it. Checked from
 * the paths' lengths before a single prompt is built.
 */
export function filesProblem(paths: readonly string[], template: string, limits: SubmissionLimits): Problem | null {
  if (paths.length > limits.maxItems)
    return { field: "files", message: `the glob matches ${paths.length} files; at most ${limits.maxItems} items per batch` };
  const templateIssue = templateProblem(template, FILE_PLACEHOLDER);
  if (templateIssue) return templateIssue;
  const shape = templateShape(template, FILE_PLACEHOLDER);
  let total = 0;
  for (let i = 0; i < paths.length; i++) {
    const keyIssue = keyProblem(paths[i]!, i);
    if (keyIssue) return keyIssue;
    const length = filledLength(shape, paths[i]!.length);
    const lengthIssue = promptLengthProblem(length, i);
    if (lengthIssue) return lengthIssue;
    total += length;
  }
  return totalProblem(total, limits, "files");
}

/** Budgets: positive, within range (null or absent = none). */
export function budgetProblem(input: { max_total_tokens?: number | null; max_cost_usd?: number | null }): Problem | null {
  const tokens = input.max_total_tokens;
  if (tokens !== undefined && tokens !== null && (!Number.isSafeInteger(tokens) || tokens < 1))
    return { field: "max_total_tokens", message: "must be a positive whole number" };
  const cost = input.max_cost_usd;
  if (cost !== undefined && cost !== null && (!Number.isFinite(cost) || cost <= 0 || cost > MAX_COST_USD))
    return { field: "max_cost_usd", message: `must be a positive number of at most ${MAX_COST_USD}` };
  return null;
}

/**
 * Everything the rules say about an items submission (the dialog's pre-send check and the
 * server's): windows, budgets, items. The first problem, or null.
 */
export function submissionProblem(
  input: {
    items: readonly SubmitItem[];
    prompt_template?: string;
    max_live_items?: number;
    max_running_items?: number;
    max_total_tokens?: number | null;
    max_cost_usd?: number | null;
  },
  limits: SubmissionLimits,
): Problem | null {
  return windowProblem(input, limits) ?? budgetProblem(input) ?? itemsProblem(input.items, input.prompt_template, limits);
}

/** The first issue of a schema check (zod's shape) as a top-level Problem: the path joined with dots. */
export function issueProblem(issues: readonly { path: readonly PropertyKey[]; message: string }[]): Problem {
  const issue = issues[0];
  const field = (issue?.path ?? []).map(String).join(".");
  return { ...(field ? { field } : {}), message: issue?.message ?? "invalid input" };
}

/** The dialog names items by their 1-based number. */
export const itemNumberLocator: Locator = {
  item: (i) => `item ${i + 1}`,
  field: (i, f) => `item ${i + 1}: ${f}`,
};

/** The first refusal the server's rules would give this submission (items named "item N"), or null: the dialog's check before sending. */
export function submissionRefusal(input: Parameters<typeof submissionProblem>[0], limits: SubmissionLimits): string | null {
  const problem = submissionProblem(input, limits);
  return problem ? problemText(problem, itemNumberLocator) : null;
}
