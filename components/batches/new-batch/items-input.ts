import Papa from "papaparse";
import { EXPECTED_MAX_BYTES, type ItemFieldValue, MAX_ITEM_FIELDS } from "@/lib/api/batch-data";
import {
  fieldNameProblem,
  fieldTemplate,
  fillFields,
  ITEM_PLACEHOLDER,
  isFieldsItem,
  isProblem,
  lineLocator,
  parseItem,
  problemText,
} from "@/lib/batch-rules";

/** Parsing what a person pastes or uploads into the New batch dialog: lines, JSONL or CSV, every bad row by line. */


/** The same substitution the server applies: every occurrence of {{item}}. */
export function expandTemplate(template: string, item: string): string {
  return template.split(ITEM_PLACEHOLDER).join(item);
}

export type ItemsFormat = "lines" | "jsonl" | "csv";

/**
 * One parsed item: a plain value (expanded by the template), a keyed explicit prompt, or an
 * object item (a CSV row under its header: fields for `{{field}}`, and `expected` for the checks).
 */
export type DraftItem =
  | { kind: "value"; value: string; key?: string }
  | { kind: "prompt"; prompt: string; key?: string }
  | { kind: "object"; fields: Record<string, ItemFieldValue>; expected?: unknown; key?: string };

export interface ParsedItems {
  items: DraftItem[];
  /** Object items' field names in first-seen order (a CSV header without item_key and expected); [] otherwise. */
  fields: string[];
  /** Whether the items carry expected values (an `expected` column or key). */
  expected: boolean;
  /** The bad rows, as "line N: reason" (the first MAX_LISTED_ERRORS); nothing may be submitted while any exists. */
  errors: string[];
  /** How many rows are bad in all. */
  errorCount: number;
  /** The first problem (with how many more), or null. */
  error: string | null;
}

/** Most row errors listed; a file that is wrong everywhere says how many more there are. */
export const MAX_LISTED_ERRORS = 20;

function result(items: DraftItem[], errors: string[], fields: string[] = [], expected = false): ParsedItems {
  const more = errors.length - 1;
  const error = errors.length === 0 ? null : more > 0 ? `${errors[0]} (and ${more} more)` : errors[0];
  return {
    items: errors.length ? [] : items,
    fields,
    expected,
    errors: errors.slice(0, MAX_LISTED_ERRORS),
    errorCount: errors.length,
    error,
  };
}

/** Chooses a parser from the file name (then from the content for pasted text). */
export function detectFormat(fileName: string | null, text: string): ItemsFormat {
  const name = (fileName ?? "").toLowerCase();
  if (name.endsWith(".jsonl") || name.endsWith(".ndjson")) return "jsonl";
  if (name.endsWith(".csv")) return "csv";
  if (name) return "lines";
  const first = text.split("\n").find((l) => l.trim() !== "");
  if (first && /^\s*[{"]/.test(first)) {
    try {
      JSON.parse(first);
      return "jsonl";
    } catch {
      return "lines";
    }
  }
  return "lines";
}

function splitLines(text: string): string[] {
  return text.replace(/^\uFEFF/, "").split(/\r?\n/);
}

function parseLines(text: string): ParsedItems {
  const items: DraftItem[] = [];
  for (const line of splitLines(text)) {
    const value = line.trim();
    if (value !== "") items.push({ kind: "value", value });
  }
  return result(items, []);
}

function optionalKey(value: unknown, where: string): string | undefined {
  if (value === undefined || value === null || value === "") return undefined;
  if (typeof value === "number") return String(value);
  if (typeof value !== "string") throw new Error(`${where}: item_key must be a string`);
  if (value.length > 200) throw new Error(`${where}: item_key must be at most 200 characters`);
  return value;
}

/**
 * JSONL: a JSON string or number per line, {item_key?, prompt} / {item_key?, item}, or an
 * object of fields `{ item_key?, <field>: value, ..., expected? }`. Every bad line is reported.
 */
function parseJsonl(text: string): ParsedItems {
  const items: DraftItem[] = [];
  const errors: string[] = [];
  const fields: string[] = [];
  let expected = false;
  splitLines(text).forEach((line, i) => {
    if (line.trim() === "") return;
    const where = `line ${i + 1}`;
    try {
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        throw new Error(`${where}: not valid JSON`);
      }
      if (typeof value === "string" || typeof value === "number") {
        const s = String(value);
        if (s.trim() === "") throw new Error(`${where}: must not be empty`);
        items.push({ kind: "value", value: s });
        return;
      }
      if (value === null || typeof value !== "object" || Array.isArray(value))
        throw new Error(`${where}: expected a string or an object with "prompt" or "item"`);
      const o = value as Record<string, unknown>;
      const own = Object.keys(o).filter((k) => k !== "item_key" && k !== "key");
      if (own.length !== 1 || (own[0] !== "prompt" && own[0] !== "item")) {
        // Any other object is an object item: its fields and expected, by the rules every door applies.
        const parsed = parseItem(o, 0);
        if (isProblem(parsed)) throw new Error(problemText(parsed, lineLocator([i + 1])));
        if (typeof parsed === "string" || !isFieldsItem(parsed)) throw new Error(`${where}: expected an object of fields`);
        for (const name of Object.keys(parsed.fields)) if (!fields.includes(name)) fields.push(name);
        if (parsed.expected !== undefined) expected = true;
        const key = optionalKey(parsed.item_key, where);
        items.push({ kind: "object", fields: parsed.fields, ...(parsed.expected !== undefined ? { expected: parsed.expected } : {}), key });
        return;
      }
      const key = optionalKey(o.item_key ?? o.key, where);
      if (typeof o.prompt === "string" && o.prompt.trim() !== "") {
        items.push({ kind: "prompt", prompt: o.prompt, key });
      } else if (typeof o.item === "string" || typeof o.item === "number") {
        const s = String(o.item);
        if (s.trim() === "") throw new Error(`${where}: item must not be empty`);
        items.push({ kind: "value", value: s, key });
      } else {
        throw new Error(`${where}: expected a non-empty "prompt" or "item" field`);
      }
    } catch (e) {
      errors.push((e as Error).message);
    }
  });
  return result(items, errors, fields, expected);
}

export interface CsvRow {
  fields: string[];
  /** Line of the file where the row starts (1-based). */
  line: number;
}

const CSV_REASONS: Record<string, string> = {
  MissingQuotes: "a quoted field is never closed (unclosed \")",
  InvalidQuotes: 'a quote inside a field: quote the whole field and double the inner quotes ("")',
};

/**
 * RFC 4180 rows through papaparse (quoted fields may hold commas, doubled quotes and
 * newlines), each with the line it starts on, and every quoting error by line.
 */
export function parseCsvRows(text: string): { rows: CsvRow[]; errors: string[] } {
  const src = text.replace(/^\uFEFF/, "");
  const rows: CsvRow[] = [];
  const errors: string[] = [];
  let start = 0;
  let line = 1;
  Papa.parse<string[]>(src, {
    delimiter: ",",
    step: (r) => {
      const here = line;
      const end = r.meta.cursor;
      // \r\n, \n or a lone \r each end a physical line (as the server's CSV door counts them).
      for (let i = start; i < end; i++) {
        const c = src.charCodeAt(i);
        if (c === 10 || (c === 13 && src.charCodeAt(i + 1) !== 10)) line++;
      }
      start = end;
      const codes = new Set(r.errors.map((e) => e.code));
      for (const code of codes) errors.push(`line ${here}: ${CSV_REASONS[code] ?? "could not be read"}`);
      if (r.data.some((f) => f.trim() !== "")) rows.push({ fields: r.data, line: here });
    },
  });
  return { rows, errors };
}

const KEY_COLUMNS = ["item_key", "key", "id"];
const VALUE_COLUMNS = ["item", "value", "input", "text"];

/** An `expected` cell: JSON when it parses, else the text; an empty cell gives none. */
function expectedValue(cell: string): unknown {
  if (cell.trim() === "") return undefined;
  try {
    return JSON.parse(cell);
  } catch {
    return cell;
  }
}

/** What a CSV's header row makes of its rows. */
type CsvShape =
  | { kind: "prompt"; prompt: number; key: number }
  | { kind: "value"; value: number; key: number }
  | { kind: "object"; names: string[]; key: number; expected: number };

/**
 * The header row decides: `prompt` (and a key column) → explicit prompts; one value column
 * (`item`, `value`, `input` or `text`, and a key column) → plain values; anything else → object
 * items, each column a field (`item_key` the key, `expected` the checks' expected value).
 */
function csvShape(header: string[], errors: string[]): CsvShape | null {
  const lower = header.map((h) => h.trim().toLowerCase());
  const keyCol = lower.findIndex((h) => KEY_COLUMNS.includes(h));
  const others = lower.filter((_, i) => i !== keyCol);
  if (others.length === 1 && others[0] === "prompt") return { kind: "prompt", prompt: lower.indexOf("prompt"), key: keyCol };
  if (others.length === 1 && VALUE_COLUMNS.includes(others[0]))
    return { kind: "value", value: lower.findIndex((h, i) => i !== keyCol && VALUE_COLUMNS.includes(h)), key: keyCol };
  const names = header.map((h) => h.trim());
  const seen = new Set<string>();
  names.forEach((name, i) => {
    if (name === "") errors.push(`line 1: column ${i + 1} has no name`);
    else if (seen.has(name)) errors.push(`line 1: the column "${name}" appears twice`);
    else {
      const issue = name === "item_key" || name === "expected" ? null : fieldNameProblem(name);
      if (issue) errors.push(`line 1: ${issue}`);
    }
    seen.add(name);
  });
  const key = names.indexOf("item_key");
  const expected = names.indexOf("expected");
  const fields = names.length - (key >= 0 ? 1 : 0) - (expected >= 0 ? 1 : 0);
  if (fields === 0) errors.push("line 1: the header names no field besides item_key and expected");
  if (fields > MAX_ITEM_FIELDS) errors.push(`line 1: ${fields} fields; an item has at most ${MAX_ITEM_FIELDS}`);
  return errors.length ? null : { kind: "object", names, key, expected };
}

/**
 * CSV with a header row (see csvShape). Every bad row is reported by line: quoting errors, a
 * field count unlike the header's, an empty prompt or item, a key or expected value too long.
 */
function parseCsv(text: string): ParsedItems {
  const { rows, errors } = parseCsvRows(text);
  if (rows.length === 0) return result([], errors);
  const header = rows[0].fields;
  const shape = csvShape(header, errors);
  if (!shape) return result([], errors);
  const items: DraftItem[] = [];
  for (const r of rows.slice(1)) {
    const where = `line ${r.line}`;
    if (r.fields.length !== header.length) {
      errors.push(`${where}: ${r.fields.length} field${r.fields.length === 1 ? "" : "s"} where the header has ${header.length}`);
      continue;
    }
    const key = shape.key >= 0 && r.fields[shape.key]?.trim() ? r.fields[shape.key].trim() : undefined;
    if (key && key.length > 200) {
      errors.push(`${where}: item_key must be at most 200 characters`);
      continue;
    }
    if (shape.kind === "object") {
      const fields: Record<string, string> = {};
      shape.names.forEach((name, i) => {
        if (i !== shape.key && i !== shape.expected) fields[name] = r.fields[i];
      });
      const expected = shape.expected >= 0 ? expectedValue(r.fields[shape.expected]) : undefined;
      if (expected !== undefined && new TextEncoder().encode(JSON.stringify(expected)).length > EXPECTED_MAX_BYTES) {
        errors.push(`${where}: expected must be at most ${EXPECTED_MAX_BYTES} bytes as JSON`);
        continue;
      }
      items.push({ kind: "object", fields, ...(expected !== undefined ? { expected } : {}), key });
      continue;
    }
    const col = shape.kind === "prompt" ? shape.prompt : shape.value;
    const cell = (r.fields[col] ?? "").trim();
    if (!cell) errors.push(`${where}: the ${header[col].trim().toLowerCase()} column is empty`);
    else items.push(shape.kind === "prompt" ? { kind: "prompt", prompt: cell, key } : { kind: "value", value: cell, key });
  }
  const fields = shape.kind === "object" ? shape.names.filter((_, i) => i !== shape.key && i !== shape.expected) : [];
  return result(items, errors, fields, shape.kind === "object" && shape.expected >= 0);
}

export function parseItemsInput(text: string, format: ItemsFormat): ParsedItems {
  if (format === "jsonl") return parseJsonl(text);
  if (format === "csv") return parseCsv(text);
  return parseLines(text);
}

/** The prompt an item will run with (what the dialog previews). */
export function draftPrompt(item: DraftItem, template: string): string {
  if (item.kind === "prompt") return item.prompt;
  if (item.kind === "object") {
    const shape = fieldTemplate(template);
    // A field the CSV lacks is refused before sending; until then the template shows as typed.
    return shape.names.every((n) => Object.hasOwn(item.fields, n)) ? fillFields(shape, item.fields) : template;
  }
  return expandTemplate(template, item.value);
}
