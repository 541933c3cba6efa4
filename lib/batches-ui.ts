import Papa from "papaparse";
import type {
  BatchProjection,
  BatchStatus,
  ItemPage,
  ItemProjection,
  ItemStatus,
  SubmitBatchInput,
} from "@/lib/api/batches";

/**
 * Pure helpers of the batch panel: control rules, item-input parsing for the New batch
 * dialog, rate / ETA math and the bookkeeping of loaded item pages. No React, no fetch, so
 * they are unit-tested directly.
 */

// ---------------------------------------------------------------------------------------------
// States and controls

const ACTIVE: ReadonlySet<BatchStatus> = new Set(["queued", "running", "paused"]);

/** A batch that may still change by itself (so the panel keeps polling it). */
export function isActiveBatch(status: BatchStatus): boolean {
  return ACTIVE.has(status);
}

/** The controls' rules are the one table's (lib/api/batch-controls.ts). */
export { allowedControls, canRetryItem, optimisticStatus } from "@/lib/api/batch-controls";

/** The outcome counts of a batch that its status words depend on. */
export interface OutcomeCounts {
  succeeded: number;
  failed: number;
  cancelled: number;
}

export type StatusTone = "active" | "paused" | "ok" | "warn" | "bad" | "neutral";

/**
 * The status of a batch in words: a batch that completed with failed or cancelled items says
 * so ("completed · 2 failed") in amber instead of a green "completed".
 */
export function batchStatusText(status: BatchStatus, counts: OutcomeCounts): { label: string; tone: StatusTone } {
  if (status === "completed") {
    const extra = [
      counts.failed ? `${formatCount(counts.failed)} failed` : "",
      counts.cancelled ? `${formatCount(counts.cancelled)} cancelled` : "",
    ].filter(Boolean);
    return extra.length ? { label: `completed · ${extra.join(" · ")}`, tone: "warn" } : { label: "completed", tone: "ok" };
  }
  if (status === "failed") return { label: "failed", tone: "bad" };
  if (status === "cancelled") return { label: "cancelled", tone: "neutral" };
  if (status === "paused") return { label: "paused", tone: "paused" };
  return { label: status, tone: "active" };
}

/** Progress as people read it: "3 / 5 done · 2 failed · 1 cancelled" (finished items of the total, then the split). */
export function progressSplit(total: number, counts: OutcomeCounts): string {
  const parts = [`${formatCount(counts.succeeded)} / ${formatCount(total)} done`];
  if (counts.failed) parts.push(`${formatCount(counts.failed)} failed`);
  if (counts.cancelled) parts.push(`${formatCount(counts.cancelled)} cancelled`);
  return parts.join(" · ");
}

/** Item states in people's words, the engine's state in brackets where two share a word. */
export const ITEM_STATUS_WORDS: Record<ItemStatus, string> = {
  pending: "Waiting (pending)",
  queued: "Waiting (queued)",
  leased: "In progress (leased)",
  running: "In progress (running)",
  succeeded: "Done",
  failed: "Failed",
  cancelled: "Cancelled",
};

/** Counters named for people, with the engine's terms for operators (shown as a tooltip). */
export const COUNTER_WORDS = {
  waiting: { label: "Waiting", engine: "pending + queued: not started yet (pending wait outside the live window)" },
  in_progress: { label: "In progress", engine: "leased + running: a worker holds the item (leased) or is executing it" },
  done: { label: "Done", engine: "succeeded" },
  failed: { label: "Failed", engine: "failed: every attempt failed" },
  cancelled: { label: "Cancelled", engine: "cancelled: stopped before it finished" },
} as const;

// ---------------------------------------------------------------------------------------------
// New batch input

export const ITEM_PLACEHOLDER = "{{item}}";

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

export interface SubmissionDraft {
  submissionKey: string;
  subagent?: string;
  template: string;
  items: DraftItem[];
  maxLiveItems?: number;
  maxRunningItems?: number;
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
  if (d.template.length > 20_000) return { body: null, error: "The prompt template must be at most 20000 characters." };
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
    if (item.kind === "value" && item.key === undefined) items.push(item.value);
    else items.push({ ...(item.key !== undefined ? { item_key: item.key } : {}), prompt: draftPrompt(item, d.template) });
  }
  const body: SubmitBatchInput = { submission_key: d.submissionKey, items };
  if (d.subagent) body.subagent = d.subagent;
  if (usesValues && items.some((i) => typeof i === "string")) body.prompt_template = d.template;
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

// ---------------------------------------------------------------------------------------------
// Rate, elapsed time and ETA

export interface RateSample {
  at: number;
  /** items executed to an end (succeeded + failed) at that moment */
  done: number;
}

export const RATE_WINDOW_MS = 30_000;

/** Items that actually ran to an end; cancelled ones are not throughput. */
export function executedCount(batch: BatchProjection): number {
  return batch.counts.succeeded + batch.counts.failed;
}

/** Appends a poll sample and drops those older than the window (keeping one anchor before it). */
export function pushSample(samples: RateSample[], sample: RateSample, windowMs = RATE_WINDOW_MS): RateSample[] {
  const last = samples[samples.length - 1];
  // A retry can lower the count; restart the window rather than report a negative rate.
  if (last && sample.done < last.done) return [sample];
  const next = [...samples, sample];
  while (next.length > 2 && next[1].at <= sample.at - windowMs) next.shift();
  return next;
}

function parseTime(s: string | null): number | null {
  if (!s) return null;
  const t = Date.parse(s);
  return Number.isFinite(t) ? t : null;
}

export interface BatchTiming {
  elapsedMs: number;
  /** items executed per second, or null when unknown */
  rate: number | null;
  /** remaining time while running, or null */
  etaMs: number | null;
}

/**
 * Elapsed runs from start (or creation) to finish (or now). The rate counts executed items
 * (not cancelled ones), prefers recent samples (at least 3 s of them) and falls back to the
 * whole-run average; the ETA exists only while running with a positive rate.
 */
export function batchTiming(batch: BatchProjection, now: number, samples: RateSample[] = []): BatchTiming {
  const start = parseTime(batch.started_at) ?? parseTime(batch.created_at) ?? now;
  const end = parseTime(batch.finished_at) ?? now;
  const elapsedMs = Math.max(0, end - start);
  const done = executedCount(batch);
  let rate: number | null = null;
  const first = samples[0];
  const last = samples[samples.length - 1];
  if (first && last && last.at - first.at >= 3_000 && batch.status === "running") {
    rate = (last.done - first.done) / ((last.at - first.at) / 1000);
  } else if (elapsedMs >= 1_000 && done > 0) {
    rate = done / (elapsedMs / 1000);
  }
  if (rate !== null && (!Number.isFinite(rate) || rate < 0)) rate = null;
  const remaining = Math.max(0, batch.total - batch.terminal);
  const etaMs = batch.status === "running" && rate && rate > 0 ? (remaining / rate) * 1000 : null;
  return { elapsedMs, rate, etaMs };
}

const pad = (n: number) => String(n).padStart(2, "0");

/** 0s, 42s, 3m 05s, 2h 07m. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${pad(s % 60)}s`;
  const h = Math.floor(m / 60);
  return `${h}h ${pad(m % 60)}m`;
}

/** 12.3/s at speed, 4.5/min when slow. */
export function formatRate(perSecond: number | null): string {
  if (perSecond === null || !Number.isFinite(perSecond)) return "—";
  if (perSecond >= 1) return `${perSecond.toFixed(1)}/s`;
  return `${(perSecond * 60).toFixed(1)}/min`;
}

/** 950, 12.3k, 4.1M. */
export function formatTokens(n: number): string {
  if (!Number.isFinite(n) || n < 0) return "0";
  if (n < 1_000) return String(Math.round(n));
  if (n < 1_000_000) return `${(n / 1_000).toFixed(1)}k`;
  return `${(n / 1_000_000).toFixed(1)}M`;
}

export function formatCount(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "0";
}

// ---------------------------------------------------------------------------------------------
// Loaded item pages

/**
 * The item pages a user has loaded, as a cursor chain. Polling refreshes one page per tick,
 * round-robin, so the request budget is one page read per interval however many pages are
 * loaded; a refresh re-links the next page's cursor, and a page that is now last drops the
 * pages after it.
 */
export interface PageChain {
  pages: { cursor: string | null; items: ItemProjection[] }[];
  nextCursor: string | null;
  /** which page the next poll refreshes */
  tick: number;
}

export function firstPageChain(page: ItemPage): PageChain {
  return { pages: [{ cursor: null, items: page.items }], nextCursor: page.next_cursor, tick: 0 };
}

export function refreshIndex(chain: PageChain | undefined): number {
  if (!chain || chain.pages.length === 0) return 0;
  return chain.tick % chain.pages.length;
}

/** Applies a refreshed page fetched with `cursor` at `index`; ignored if the chain moved on. */
export function applyRefresh(chain: PageChain, index: number, cursor: string | null, page: ItemPage): PageChain {
  const at = chain.pages[index];
  if (!at || at.cursor !== cursor) return { ...chain, tick: chain.tick + 1 };
  const pages = chain.pages.slice(0, index + 1);
  pages[index] = { cursor, items: page.items };
  if (page.next_cursor === null) return { pages, nextCursor: null, tick: chain.tick + 1 };
  const rest = chain.pages.slice(index + 1);
  if (rest.length === 0) return { pages, nextCursor: page.next_cursor, tick: chain.tick + 1 };
  rest[0] = { ...rest[0], cursor: page.next_cursor };
  return { pages: [...pages, ...rest], nextCursor: chain.nextCursor, tick: chain.tick + 1 };
}

/** Appends the page fetched with `cursor` by "Load more"; ignored unless it continues the chain. */
export function appendPage(chain: PageChain, cursor: string, page: ItemPage): PageChain {
  if (chain.nextCursor !== cursor) return chain;
  return { pages: [...chain.pages, { cursor, items: page.items }], nextCursor: page.next_cursor, tick: chain.tick };
}

/** Items in order, each once (pages may overlap briefly while a filtered set shifts). */
export function chainItems(chain: PageChain | undefined): ItemProjection[] {
  if (!chain) return [];
  const seen = new Set<string>();
  const out: ItemProjection[] = [];
  for (const p of chain.pages)
    for (const item of p.items) {
      if (seen.has(item.id)) continue;
      seen.add(item.id);
      out.push(item);
    }
  return out;
}

/** Replaces one item wherever it is loaded (after a retry). */
export function replaceItem(chain: PageChain, item: ItemProjection): PageChain {
  return {
    ...chain,
    pages: chain.pages.map((p) => ({ ...p, items: p.items.map((i) => (i.id === item.id ? item : i)) })),
  };
}
