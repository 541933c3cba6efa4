import {
  type Check,
  EXPECTED_MAX_BYTES,
  ITEM_FIELD_NAME_MAX_CHARS,
  type ItemFieldValue,
  MAX_ITEM_FIELDS,
  type ObjectItem,
} from "@/lib/api/batch-data";

/**
 * The rules every batch submission obeys, whatever its door (JSON, NDJSON, CSV, files, the
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

/**
 * One item as submitted (the wire shape): a value for the template's {{item}}, an explicit
 * prompt `{ item_key?, prompt }`, or an object of fields `{ item_key?, <field>: value, ..., expected? }`.
 */
export type SubmitItem = string | { item_key?: string; prompt: string } | WireObjectItem;
export interface WireObjectItem {
  item_key?: string;
  expected?: unknown;
  [field: string]: unknown;
}

/** An item after parseItem: a {{item}} value, an explicit prompt, or fields (with their input: compact JSON without expected). */
export type ParsedItem = string | { item_key?: string; prompt: string } | FieldsItem;
export type FieldsItem = ObjectItem & { input: string };

export function isFieldsItem(item: ParsedItem): item is FieldsItem {
  return typeof item !== "string" && "fields" in item;
}

/** The fields of all object items of a batch together (their names become the results' input columns). */
export const MAX_BATCH_FIELDS = 256;
/** Deepest nesting of a JSON value a submission may carry (expected, output_schema): serializing stays far from the stack's limit. */
export const MAX_JSON_DEPTH = 64;

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

const FIELD_NAME_FORBIDDEN = /[{}\p{Cc}]/u;
/** `{{name}}` in a template: a field name as fieldNameProblem allows it ({{item}} for string items is the same syntax). */
const PLACEHOLDER = new RegExp(`\\{\\{([^{}\\p{Cc}]{1,${ITEM_FIELD_NAME_MAX_CHARS}})\\}\\}`, "gu");

/**
 * The template's text before its first placeholder: what every item of a batch starts its prompt
 * with (sent first, and marked for the provider's prompt cache where it takes a mark).
 */
export function sharedPrefix(template: string | null | undefined): string {
  if (!template) return "";
  const first = template.search(new RegExp(PLACEHOLDER.source, "u"));
  return first < 0 ? template : template.slice(0, first);
}

function shown(name: string): string {
  return JSON.stringify(name.length > 40 ? `${name.slice(0, 40)}…` : name);
}

/** A field name: 1..64 characters, none of them a brace or a control character (so {{name}} can name it). */
export function fieldNameProblem(name: string): string | null {
  if (name.length === 0) return "a field name must not be empty";
  if (name.length > ITEM_FIELD_NAME_MAX_CHARS)
    return `field name ${shown(name)} is longer than ${ITEM_FIELD_NAME_MAX_CHARS} characters`;
  if (FIELD_NAME_FORBIDDEN.test(name)) return `field name ${shown(name)} may not contain braces or control characters`;
  return null;
}

/**
 * Why a JSON value cannot be stored as submitted (nested deeper than MAX_JSON_DEPTH, over
 * `maxBytes` as UTF-8 JSON, or holding text PostgreSQL's jsonb refuses: NUL, a lone surrogate),
 * or null. Walks without recursion and stops at the first problem, so a hostile value costs
 * no more than reading it.
 */
export function jsonValueProblem(value: unknown, maxBytes: number): string | null {
  const stack: [unknown, number][] = [[value, 1]];
  let budget = 0;
  const text = (s: string): string | null => {
    budget += s.length;
    if (s.includes("\0")) return "must not contain NUL (\\u0000) characters";
    if (LONE_SURROGATE.test(s)) return "must not contain lone surrogate characters";
    return null;
  };
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (budget > maxBytes) break;
    if (typeof v === "string") {
      const issue = text(v);
      if (issue) return issue;
      continue;
    }
    budget += 1;
    if (v === null || typeof v !== "object") continue;
    if (depth > MAX_JSON_DEPTH) return `must be nested at most ${MAX_JSON_DEPTH} levels deep`;
    for (const [k, child] of Object.entries(v)) {
      if (!Array.isArray(v)) {
        const issue = text(k);
        if (issue) return issue;
      }
      stack.push([child, depth + 1]);
    }
  }
  // Every character counted above is at least one byte of the JSON text.
  const bytes = budget > maxBytes ? budget : new TextEncoder().encode(JSON.stringify(value)).length;
  return bytes > maxBytes ? `must be at most ${maxBytes} bytes as JSON` : null;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const PROMPT_KEYS = new Set(["item_key", "prompt"]);

/**
 * Structural check of one item value: a non-empty string, an explicit prompt (an object whose
 * only keys are `prompt` and an optional `item_key`), or an object of fields (every other
 * object: up to 64 string / number / boolean fields, an optional item_key and `expected`).
 */
export function parseItem(value: unknown, index: number): ParsedItem | Problem {
  if (typeof value === "string") {
    if (value.length === 0) return { item: index, message: "must not be empty" };
    return value;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    return { item: index, message: "expected a string or an object ({item_key?, prompt} or {item_key?, <field>: value, ..., expected?})" };
  const o = value as Record<string, unknown>;
  if (o.item_key !== undefined && typeof o.item_key !== "string")
    return { item: index, field: "item_key", message: "must be a string" };
  const keys = Object.keys(o);
  if (keys.every((k) => PROMPT_KEYS.has(k)) && keys.includes("prompt")) {
    if (typeof o.prompt !== "string") return { item: index, field: "prompt", message: "must be a string" };
    return o.item_key === undefined ? { prompt: o.prompt } : { item_key: o.item_key, prompt: o.prompt };
  }
  const fields: [string, ItemFieldValue][] = [];
  for (const name of keys) {
    if (name === "item_key" || name === "expected") continue;
    if (fields.length === MAX_ITEM_FIELDS) return { item: index, message: `at most ${MAX_ITEM_FIELDS} fields per item` };
    const nameIssue = fieldNameProblem(name);
    if (nameIssue) return { item: index, message: nameIssue };
    const v = o[name];
    if (typeof v !== "string" && typeof v !== "boolean" && !(typeof v === "number" && Number.isFinite(v)))
      return { item: index, field: name, message: "must be a string, a number or a boolean" };
    fields.push([name, v]);
  }
  if (fields.length === 0)
    return { item: index, message: "an object item needs at least one field besides item_key and expected (or a prompt)" };
  const item: FieldsItem = { fields: Object.fromEntries(fields), input: "" };
  // Object.fromEntries defines own properties, so a field named __proto__ is just a field.
  item.input = JSON.stringify(item.fields);
  if (o.item_key !== undefined) item.item_key = o.item_key;
  if ("expected" in o && o.expected !== undefined) {
    const issue = jsonValueProblem(o.expected, EXPECTED_MAX_BYTES);
    if (issue) return { item: index, field: "expected", message: issue };
    item.expected = o.expected;
  }
  return item;
}

export function isProblem(value: unknown): value is Problem {
  return typeof value === "object" && value !== null && "message" in value && typeof value.message === "string";
}

/** The key an item gets: its explicit item_key, else item-1, item-2, ... by position. */
export function itemKey(item: ParsedItem, index: number): string {
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

/**
 * A prompt template: bounded, and holding its placeholder (null: items of fields, whose
 * template must name at least one {{field}}).
 */
export function templateProblem(template: string | undefined, placeholder: string | null): Problem | null {
  if (template === undefined) return null;
  if (template.length === 0) return { field: "prompt_template", message: "must not be empty" };
  if (template.length > PROMPT_TEMPLATE_MAX_CHARS)
    return { field: "prompt_template", message: `must be at most ${PROMPT_TEMPLATE_MAX_CHARS} characters` };
  if (placeholder === null) {
    if (fieldTemplate(template).slots.size === 0)
      return { field: "prompt_template", message: `must contain ${ITEM_PLACEHOLDER} or name the items' fields as {{<field>}}` };
    return null;
  }
  if (!template.includes(placeholder)) return { field: "prompt_template", message: `must contain ${placeholder}` };
  return null;
}

export function totalProblem(total: number, limits: SubmissionLimits, field: string): Problem | null {
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
 * A template for object items, read once per batch: each {{field}} name and how often it
 * occurs, the length without them, and the text between them (`parts[i]` precedes `names[i]`).
 */
export interface FieldTemplate {
  fixed: number;
  slots: Map<string, number>;
  parts: string[];
  names: string[];
}

export function fieldTemplate(template: string): FieldTemplate {
  const slots = new Map<string, number>();
  const parts: string[] = [];
  const names: string[] = [];
  let at = 0;
  for (const m of template.matchAll(PLACEHOLDER)) {
    slots.set(m[1]!, (slots.get(m[1]!) ?? 0) + 1);
    parts.push(template.slice(at, m.index));
    names.push(m[1]!);
    at = m.index + m[0].length;
  }
  parts.push(template.slice(at));
  return { fixed: parts.reduce((n, p) => n + p.length, 0), slots, parts, names };
}

/**
 * An object item's prompt: the template with every {{field}} replaced (only after the bounds
 * held, with every named field present), else its `prompt` field. Work is one step per
 * placeholder, never a scan of the template.
 */
export function fillFields(shape: FieldTemplate | null, fields: Readonly<Record<string, ItemFieldValue>>): string {
  if (shape === null) return String(fields.prompt);
  let prompt = shape.parts[0]!;
  for (let i = 0; i < shape.names.length; i++) prompt += String(fields[shape.names[i]!]) + shape.parts[i + 1]!;
  return prompt;
}

/** The length of an object item's prompt, computed from its fields' lengths, or the field the template names that the item lacks. */
function fieldsPromptLength(item: FieldsItem, shape: FieldTemplate | null, index: number): number | Problem {
  if (shape === null) {
    if (!Object.hasOwn(item.fields, "prompt"))
      return { item: index, message: "an object item needs a prompt_template naming its fields as {{<field>}} (or a prompt field)" };
    return String(item.fields.prompt).length;
  }
  let length = shape.fixed;
  // An item has at most 64 fields, so this stops within 65 names however many the template has.
  for (const [name, count] of shape.slots) {
    if (!Object.hasOwn(item.fields, name))
      return { item: index, field: name, message: `the prompt_template names {{${name}}} and this item has no such field` };
    length += count * String(item.fields[name]).length;
  }
  return length;
}

/** The object items' field names in first-seen order (the results' input columns). */
export function inputFields(items: readonly ParsedItem[]): string[] {
  const names = new Set<string>();
  for (const item of items) if (isFieldsItem(item)) for (const name of Object.keys(item.fields)) names.add(name);
  return [...names];
}

/**
 * The items' rules, from lengths alone (nothing is expanded): count, keys (bounded, unique),
 * the template's {{item}} and {{field}}s, each prompt's length and the batch's total. The
 * first problem, or null.
 */
export function itemsProblem(items: readonly ParsedItem[], template: string | undefined, limits: SubmissionLimits): Problem | null {
  if (items.length === 0) return { field: "items", message: "must contain at least one item" };
  if (items.length > limits.maxItems)
    return { field: "items", message: `at most ${limits.maxItems} items per batch (got ${items.length})` };
  const values = items.some((item) => typeof item === "string");
  const fieldShape = template === undefined ? null : fieldTemplate(template);
  if (template !== undefined) {
    const templateIssue = templateProblem(template, values ? ITEM_PLACEHOLDER : null);
    if (templateIssue) return templateIssue;
  }
  const shape = template === undefined ? { fixed: 0, slots: 1 } : templateShape(template, ITEM_PLACEHOLDER);
  const seen = new Map<string, number>();
  const fieldNames = new Set<string>();
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
    let length: number;
    let cost: number | undefined;
    if (typeof item === "string") {
      if (item.length === 0) return { item: i, message: "must not be empty" };
      length = filledLength(shape, item.length);
    } else if (isFieldsItem(item)) {
      if (item.input.length > ITEM_PROMPT_MAX_CHARS)
        return { item: i, message: `its fields are ${item.input.length} characters as JSON; at most ${ITEM_PROMPT_MAX_CHARS} per item` };
      for (const name of Object.keys(item.fields)) fieldNames.add(name);
      if (fieldNames.size > MAX_BATCH_FIELDS)
        return { item: i, message: `the items together have more than ${MAX_BATCH_FIELDS} distinct fields` };
      const filled = fieldsPromptLength(item, fieldShape, i);
      if (isProblem(filled)) return filled;
      length = filled;
      // Filling takes a step per placeholder even where a value is empty: the total counts at least that.
      cost = Math.max(length, fieldShape?.names.length ?? 0);
    } else {
      length = item.prompt.length;
    }
    const lengthIssue = promptLengthProblem(length, i);
    if (lengthIssue) return lengthIssue;
    total += cost ?? length;
  }
  return totalProblem(total, limits, "items");
}

/** Each item's shape, the first bad one as a Problem. */
export function parseItems(raw: readonly unknown[]): ParsedItem[] | Problem {
  const items: ParsedItem[] = [];
  for (let i = 0; i < raw.length; i++) {
    const item = parseItem(raw[i], i);
    if (isProblem(item)) return item;
    items.push(item);
  }
  return items;
}

/**
 * What the checks need from the batch: a `path` into the answer needs an output schema (without
 * one the answer is text: regex matches it whole, equals compares it whole with path ""), and
 * `equals` needs items that carry `expected`. Whether patterns and schemas compile, and a judge's
 * model, the server checks (server/batches/submit.ts).
 */
export function checksProblem(checks: readonly Check[], batch: { outputSchema: boolean; expected: boolean }): Problem | null {
  for (let i = 0; i < checks.length; i++) {
    const check = checks[i]!;
    if (check.type !== "judge" && check.path && !batch.outputSchema)
      return {
        field: `checks.${i}.path`,
        message: 'points into a JSON answer and the batch has no output_schema (without one, omit path or use "" for the whole answer)',
      };
    if (check.type === "equals" && !batch.expected)
      return { field: `checks.${i}`, message: "an equals check compares with each item's expected, and no item carries expected" };
  }
  return null;
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
    items: readonly unknown[];
    prompt_template?: string;
    max_live_items?: number;
    max_running_items?: number;
    max_total_tokens?: number | null;
    max_cost_usd?: number | null;
  },
  limits: SubmissionLimits,
): Problem | null {
  const first = windowProblem(input, limits) ?? budgetProblem(input);
  if (first) return first;
  if (input.items.length > limits.maxItems)
    return { field: "items", message: `at most ${limits.maxItems} items per batch (got ${input.items.length})` };
  const items = parseItems(input.items);
  return isProblem(items) ? items : itemsProblem(items, input.prompt_template, limits);
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
