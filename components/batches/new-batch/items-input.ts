import Papa from "papaparse";
import { ITEM_PLACEHOLDER } from "@/lib/batch-rules";

/** Parsing what a person pastes or uploads into the New batch dialog: lines, JSONL or CSV, every bad row by line. */


/** The same substitution the server applies: every occurrence of {{item}}. */
export function expandTemplate(template: string, item: string): string {
  return template.split(ITEM_PLACEHOLDER).join(item);
}

export type ItemsFormat = "lines" | "jsonl" | "csv";

/** One parsed item: a plain value (expanded by the template) or a keyed explicit prompt. */
export type DraftItem = { kind: "value"; value: string; key?: string } | { kind: "prompt"; prompt: string; key?: string };

export interface ParsedItems {
  items: DraftItem[];
  /** The bad rows, as "line N: reason" (the first MAX_LISTED_ERRORS); nothing may be submitted while any exists. */
  errors: string[];
  /** How many rows are bad in all. */
  errorCount: number;
  /** The first problem (with how many more), or null. */
  error: string | null;
}

/** Most row errors listed; a file that is wrong everywhere says how many more there are. */
export const MAX_LISTED_ERRORS = 20;

function result(items: DraftItem[], errors: string[]): ParsedItems {
  const more = errors.length - 1;
  const error = errors.length === 0 ? null : more > 0 ? `${errors[0]} (and ${more} more)` : errors[0];
  return { items: errors.length ? [] : items, errors: errors.slice(0, MAX_LISTED_ERRORS), errorCount: errors.length, error };
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

/** JSONL: a JSON string or number per line, or {item_key?, prompt} / {item_key?, item}. Every bad line is reported. */
function parseJsonl(text: string): ParsedItems {
  const items: DraftItem[] = [];
  const errors: string[] = [];
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
  return result(items, errors);
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
      for (let i = start; i < end; i++) if (src.charCodeAt(i) === 10) line++;
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

/**
 * CSV: with a header naming `prompt` or `item` (and optionally `item_key`), those columns;
 * without one, each row's fields joined by ", " become the item. Every bad row is reported
 * by line: quoting errors, a field count unlike the header's, an empty prompt or item.
 */
function parseCsv(text: string): ParsedItems {
  const { rows, errors } = parseCsvRows(text);
  if (rows.length === 0) return result([], errors);
  const header = rows[0].fields.map((h) => h.trim().toLowerCase());
  const promptCol = header.indexOf("prompt");
  const valueCol = header.findIndex((h) => VALUE_COLUMNS.includes(h));
  const keyCol = header.findIndex((h) => KEY_COLUMNS.includes(h));
  const items: DraftItem[] = [];
  if (promptCol < 0 && valueCol < 0) {
    for (const r of rows) items.push({ kind: "value", value: r.fields.map((f) => f.trim()).join(", ") });
    return result(items, errors);
  }
  for (const r of rows.slice(1)) {
    const where = `line ${r.line}`;
    if (r.fields.length !== header.length) {
      errors.push(`${where}: ${r.fields.length} fields where the header has ${header.length}`);
      continue;
    }
    const key = keyCol >= 0 && r.fields[keyCol]?.trim() ? r.fields[keyCol].trim() : undefined;
    if (key && key.length > 200) {
      errors.push(`${where}: item_key must be at most 200 characters`);
      continue;
    }
    const prompt = promptCol >= 0 ? (r.fields[promptCol] ?? "").trim() : "";
    const value = valueCol >= 0 ? (r.fields[valueCol] ?? "").trim() : "";
    if (prompt) items.push({ kind: "prompt", prompt, key });
    else if (value) items.push({ kind: "value", value, key });
    else errors.push(`${where}: the ${promptCol >= 0 ? "prompt" : header[valueCol]} column is empty`);
  }
  return result(items, errors);
}

export function parseItemsInput(text: string, format: ItemsFormat): ParsedItems {
  if (format === "jsonl") return parseJsonl(text);
  if (format === "csv") return parseCsv(text);
  return parseLines(text);
}

/** The prompt an item will run with (what the dialog previews). */
export function draftPrompt(item: DraftItem, template: string): string {
  return item.kind === "prompt" ? item.prompt : expandTemplate(template, item.value);
}
