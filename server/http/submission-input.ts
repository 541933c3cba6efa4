import "server-only";
import Papa from "papaparse";
import { z } from "zod";
import {
  type SubmitBatchInput,
  submissionFieldsShape,
  submitBatchSchema,
  submitChecksSchema,
  reviewPolicySchema,
  submitOutputSchemaSchema,
} from "@/lib/api/batches";
import { MAX_ITEM_FIELDS } from "@/lib/api/batch-data";
import { GOLDEN_ITEMS_MAX, type GoldenItemInput, goldenItemInputSchema } from "@/lib/api/golden-sets";
import { type BatchSubmission, submitFileBatchSchema, submitGoldenBatchSchema } from "@/lib/api/files";
import {
  fieldNameProblem,
  issueProblem,
  isProblem,
  jsonLocator,
  type Locator,
  lineLocator,
  PROMPT_TEMPLATE_MAX_CHARS,
  parseItem,
  problemText,
  type SubmissionLimits,
  type SubmitItem,
  submissionLimits,
  submissionProblem,
  windowProblem,
} from "@/lib/batch-rules";
import type { FlotillaConfig } from "@/lib/config";
import { refusal } from "@/server/batches/submit";
import { AppError } from "@/server/errors";
import { readBodyText } from "./route";

/**
 * The HTTP door into a batch: a JSON body (`submitBatchSchema`, or a `files` glob), an
 * `application/x-ndjson` upload of items or a `text/csv` upload of records, with the other
 * fields as query parameters. It parses the envelope into the normalized submission plus a
 * locator (`items.3` / `line 4`) and checks it with the shared rules (lib/batch-rules.ts) so an
 * upload fails fast on its first bad line; the writer (server/batches/submit.ts) applies the
 * same rules, with the same locator, to everything else (sub-agent, schema, checks, quotas).
 */

export type SubmissionFormat = "json" | "ndjson" | "csv";

const NDJSON_TYPES = new Set(["application/x-ndjson", "application/jsonl", "application/x-jsonlines"]);
const CSV_TYPES = new Set(["text/csv", "application/csv"]);

/** JSON when the type says so (or says nothing, as some clients do); NDJSON for the line formats; CSV; anything else 415. */
export function submissionFormat(contentType: string | null): SubmissionFormat {
  const type = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  if (type === "" || type === "application/json") return "json";
  if (NDJSON_TYPES.has(type)) return "ndjson";
  if (CSV_TYPES.has(type)) return "csv";
  throw new AppError(
    "unsupported_media_type",
    `content type ${type} is not supported; send application/json, application/x-ndjson or text/csv`,
  );
}

const jsonEnvelopeSchema = submitBatchSchema.omit({ items: true }).extend({
  items: z.array(z.unknown()).min(1, "must contain at least one item"),
});

export function parseJsonSubmission(text: string, limits: SubmissionLimits): BatchSubmission {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new AppError("invalid_json", "request body is not valid JSON");
  }
  return parseSubmissionBody(value, limits);
}

/** The JSON door's body once parsed (also an MCP submit_batch call's arguments): items or files, checked by the shared rules. */
export function parseSubmissionBody(value: unknown, limits: SubmissionLimits): BatchSubmission {
  if (value !== null && typeof value === "object" && "golden_set" in value) return parseGoldenSubmission(value, limits);
  if (value !== null && typeof value === "object" && "files" in value) return parseFileSubmission(value, limits);
  const envelope = jsonEnvelopeSchema.safeParse(value);
  if (!envelope.success) throw refusal(issueProblem(envelope.error.issues));
  const input = { ...envelope.data, items: envelope.data.items as SubmitItem[] };
  const problem = submissionProblem(input, limits);
  if (problem) throw refusal(problem);
  return input;
}

/** A run against a golden set: its items come from the set (server/batches/golden-sets.ts goldenRunItems). */
function parseGoldenSubmission(value: object, limits: SubmissionLimits): BatchSubmission {
  if ("items" in value || "files" in value)
    throw refusal({ field: "golden_set", message: `give either golden_set or ${"items" in value ? "items" : "files"}, not both` });
  const parsed = submitGoldenBatchSchema.safeParse(value);
  if (!parsed.success) throw refusal(issueProblem(parsed.error.issues));
  const problem = windowProblem(parsed.data, limits);
  if (problem) throw refusal(problem);
  return parsed.data;
}

/** A batch over workspace files: a glob instead of items (matched against the thread when written). */
function parseFileSubmission(value: object, limits: SubmissionLimits): BatchSubmission {
  if ("items" in value) throw refusal({ field: "files", message: "send either items or files, not both" });
  const parsed = submitFileBatchSchema.safeParse(value);
  if (!parsed.success) throw refusal(issueProblem(parsed.error.issues));
  const problem = windowProblem(parsed.data, limits);
  if (problem) throw refusal(problem);
  return parsed.data;
}

/** A query parameter holding JSON (URL-encoded), then checked like the JSON door's field. */
function jsonParam<T extends z.ZodType>(schema: T) {
  return z
    .string()
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: "custom", message: "must be JSON (URL-encoded in the query string)" });
        return z.NEVER;
      }
    })
    .pipe(schema);
}

/** A number arriving as query text: its text checked against `pattern`, then the JSON door's rule for the field. */
const numberParam = <T extends z.ZodType<unknown, number>>(pattern: RegExp, message: string, field: T) =>
  z.string().regex(pattern, message).transform(Number).pipe(field);
const WHOLE_NUMBER = /^\d+$/;
const positiveIntParam = numberParam(WHOLE_NUMBER, "must be a positive whole number", submissionFieldsShape.max_total_tokens.unwrap());
const positiveNumberParam = numberParam(/^\d+(\.\d+)?$/, "must be a positive number", submissionFieldsShape.max_cost_usd.unwrap());
const pilotParam = numberParam(WHOLE_NUMBER, "must be a positive whole number", submissionFieldsShape.pilot.unwrap());
/** Query parameters of an NDJSON or CSV upload: the JSON door's fields, with numbers arriving as text and objects as JSON text. */
const uploadParamsSchema = z
  .object({
    submission_key: submissionFieldsShape.submission_key,
    subagent: submissionFieldsShape.subagent,
    model: submissionFieldsShape.model,
    prompt_template: z
      .string()
      .min(1, "must not be empty")
      .max(PROMPT_TEMPLATE_MAX_CHARS, `must be at most ${PROMPT_TEMPLATE_MAX_CHARS} characters`)
      .optional(),
    max_live_items: positiveIntParam.optional(),
    max_running_items: positiveIntParam.optional(),
    max_total_tokens: positiveIntParam.optional(),
    max_cost_usd: positiveNumberParam.optional(),
    pilot: pilotParam.optional(),
    output_schema: jsonParam(submitOutputSchemaSchema).optional(),
    checks: jsonParam(submitChecksSchema).optional(),
    review: jsonParam(reviewPolicySchema).optional(),
    examples: jsonParam(submissionFieldsShape.examples.unwrap()).optional(),
  })
  .strict();

export function parseNdjsonSubmission(text: string, params: URLSearchParams, limits: SubmissionLimits): SubmitBatchInput {
  return parseUpload("ndjson", text, params, limits).input;
}

/** The upload's other fields, from its query string (each at most once). */
function queryFields(params: URLSearchParams): z.output<typeof uploadParamsSchema> {
  const query: Record<string, string> = {};
  for (const [name, value] of params) {
    if (name in query) throw refusal({ field: name, message: "given more than once" });
    query[name] = value;
  }
  const parsedQuery = uploadParamsSchema.safeParse(query);
  if (!parsedQuery.success) {
    const issue = parsedQuery.error.issues[0];
    // A strict object reports unknown keys at the root; name them like any other field.
    if (issue?.code === "unrecognized_keys") throw refusal({ field: issue.keys[0], message: "unknown query parameter" });
    throw refusal(issueProblem(parsedQuery.error.issues));
  }
  return parsedQuery.data;
}

/** An upload's items as they are read, each with its physical line: bounded, and each checked as it comes. */
class UploadItems {
  readonly items: SubmitItem[] = [];
  private readonly lines: number[] = [];
  readonly locator: Locator = lineLocator(this.lines);

  constructor(
    private readonly limits: Pick<SubmissionLimits, "maxItems">,
    private readonly per = "per batch",
  ) {}

  /** Refuses the item on `line` past the bound (reading stops at the first line past it). */
  makeRoom(line: number): void {
    if (this.items.length === this.limits.maxItems)
      throw refusal({ message: `line ${line}: at most ${this.limits.maxItems} items ${this.per}` });
  }

  /** The physical line item `index` started on. */
  lineOf(index: number): number {
    return this.lines[index]!;
  }

  /** An item checked by its caller's own rules (a golden set's line). */
  take(value: unknown, line: number): void {
    this.lines.push(line);
    this.items.push(value as SubmitItem);
  }

  add(value: unknown, line: number): void {
    this.lines.push(line);
    const item = parseItem(value, this.items.length);
    if (isProblem(item)) throw refusal(item, this.locator);
    this.items.push(value as SubmitItem);
  }
}

/** The upload's items with the query's fields, checked by the shared rules with the upload's locator. */
function uploaded(
  fields: z.output<typeof uploadParamsSchema>,
  { items, locator }: UploadItems,
  limits: SubmissionLimits,
  empty: string,
): { input: SubmitBatchInput; locator: Locator } {
  if (items.length === 0) throw refusal({ field: "items", message: `must contain at least one item (${empty})` });
  const input = { ...fields, items };
  const problem = submissionProblem(input, limits);
  if (problem) throw refusal(problem, locator);
  return { input, locator };
}

/**
 * An NDJSON or CSV upload: the query's fields first, then the body's records as items, and the
 * submission plus its locator (the physical line of every item).
 */
function parseUpload(
  format: "ndjson" | "csv",
  text: string,
  params: URLSearchParams,
  limits: SubmissionLimits,
): { input: SubmitBatchInput; locator: Locator } {
  if (params.has("golden_set")) throw refusal({ field: "golden_set", message: "give either golden_set or an uploaded file of items, not both" });
  const fields = queryFields(params);
  const items = new UploadItems(limits);
  if (format === "csv") {
    readCsvRecords(text, items);
    return uploaded(fields, items, limits, "a header row, then one record per line");
  }
  readNdjsonLines(text, items);
  return uploaded(fields, items, limits, "one JSON string or object per line");
}

/**
 * A golden set's file (DESIGN "Reviews that teach": a CSV / JSONL with `expected`), read by the
 * batch uploads' own readers: CSV as an upload's records (item_key, expected, every other column
 * a field), JSONL one item a line as the JSON body's items take them ({item_key?, input | fields,
 * expected}). 400 naming the line: a record without `expected`, a bad line, past GOLDEN_ITEMS_MAX.
 * The items are then checked as the JSON body's are (golden-sets.ts checkItems).
 */
export function parseGoldenUpload(format: "csv" | "ndjson", text: string): GoldenItemInput[] {
  const items = new UploadItems({ maxItems: GOLDEN_ITEMS_MAX }, "per request");
  if (format === "csv") readCsvRecords(text, items);
  else
    readJsonLines(text, items, (value, line) => {
      const parsed = goldenItemInputSchema.safeParse(value);
      if (!parsed.success) throw refusal({ message: `line ${line}: ${problemText(issueProblem(parsed.error.issues))}` });
      items.take(value, line);
    });
  if (items.items.length === 0) throw refusal({ field: "file", message: "holds no items" });
  if (format === "csv" && items.items.every((item) => (item as Record<string, unknown>).expected === undefined))
    throw refusal({ field: "file", message: "the CSV needs an expected column (the right answer of each item)" });
  return items.items.map((raw, index) => {
    const record = raw as Record<string, unknown>;
    if (record.expected === undefined) throw refusal({ message: `line ${items.lineOf(index)}: expected: is required` });
    if (format === "ndjson") return record as GoldenItemInput;
    const { item_key, expected, ...fields } = record;
    return { ...(typeof item_key === "string" ? { item_key } : {}), fields, expected };
  });
}

/** One JSON value a line (blank lines skipped), each handed to `accept` with its line. */
function readJsonLines(text: string, items: UploadItems, accept: (value: unknown, line: number) => void): void {
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\r$/, "");
    if (line.trim() === "") continue;
    items.makeRoom(i + 1);
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw refusal({ message: `line ${i + 1}: not valid JSON` });
    }
    accept(value, i + 1);
  }
}

/** One JSON value a line; blank lines are skipped. */
function readNdjsonLines(text: string, items: UploadItems): void {
  readJsonLines(text, items, (value, line) => items.add(value, line));
}

const CSV_QUOTE_ERRORS: Record<string, string> = {
  MissingQuotes: "a quoted field is not closed",
  InvalidQuotes: 'a quoted field is malformed (a quote inside it must be doubled: "")',
};

/** Line breaks in text[from, to): \r\n, \n or a lone \r each end one physical line. */
function lineBreaks(text: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c === 10 || (c === 13 && text.charCodeAt(i + 1) !== 10)) n++;
  }
  return n;
}

/** The header row: item_key and expected are special, every other column a field (named as fields may be, at most 64). */
function csvHeader(row: string[]): string[] {
  const seen = new Set<string>();
  let fields = 0;
  for (const name of row) {
    if (seen.has(name)) throw refusal({ message: `line 1: column ${JSON.stringify(name)} appears more than once` });
    seen.add(name);
    if (name === "item_key" || name === "expected") continue;
    const issue = fieldNameProblem(name);
    if (issue) throw refusal({ message: `line 1: ${name === "" ? "a column has no name" : issue}` });
    if (++fields > MAX_ITEM_FIELDS) throw refusal({ message: `line 1: at most ${MAX_ITEM_FIELDS} field columns` });
  }
  if (fields === 0) throw refusal({ message: "line 1: the header needs at least one column besides item_key and expected" });
  return row;
}

/** One record as an item: its columns as fields, `item_key` as the key, `expected` as JSON when it parses (else the text; empty: none). */
function csvItem(header: readonly string[], row: readonly string[]): SubmitItem {
  const entries: [string, unknown][] = [];
  header.forEach((name, i) => {
    const cell = row[i]!;
    if (name !== "expected") entries.push([name, cell]);
    else if (cell !== "") {
      let expected: unknown = cell;
      try {
        expected = JSON.parse(cell);
      } catch {}
      entries.push([name, expected]);
    }
  });
  // fromEntries defines own properties: a column named __proto__ is just a field.
  return Object.fromEntries(entries) as SubmitItem;
}

/**
 * A CSV upload (RFC 4180, comma-separated, UTF-8, an optional BOM): the header row names the
 * fields, every record is an object item. A bad record is refused naming the physical line it
 * starts on (quoted fields may hold line breaks, so records and lines differ). Blank lines may
 * only end the file.
 */
function readCsvRecords(text: string, items: UploadItems): void {
  const body = text.startsWith("\uFEFF") ? text.slice(1) : text;
  let header: string[] | null = null;
  let start = 0;
  let line = 1;
  let blank: number | null = null;
  let failure: unknown = null;
  Papa.parse<string[]>(body, {
    delimiter: ",",
    skipEmptyLines: false,
    step: (row, parser) => {
      try {
        const from = start;
        start = row.meta.cursor;
        if (from >= body.length) return; // the end of the last line
        const at = line;
        line += lineBreaks(body, from, start);
        const error = row.errors[0];
        if (error) throw refusal({ message: `line ${at}: ${CSV_QUOTE_ERRORS[error.code] ?? error.message}` });
        const cells = row.data;
        if (cells.length === 1 && cells[0] === "") {
          blank ??= at;
          return;
        }
        if (blank !== null) throw refusal({ message: `line ${blank}: empty record (blank lines may only end the file)` });
        if (header === null) {
          header = csvHeader(cells);
          return;
        }
        if (cells.length !== header.length)
          throw refusal({ message: `line ${at}: has ${cells.length} fields; the header has ${header.length}` });
        items.makeRoom(at);
        items.add(csvItem(header, cells), at);
      } catch (err) {
        failure = err;
        parser.abort();
      }
    },
  });
  if (failure) throw failure;
}

/** Every door refuses a submission (503) while durable batches are turned off. */
export function assertBatchesEnabled(config: FlotillaConfig): void {
  if (!config.subagent_batches.enabled)
    throw new AppError("unavailable", "durable batches are disabled on this server (subagent_batches.enabled is false)");
}

/**
 * Reads a submission request: 415 for other content types, 413 past http.max_body_bytes (never
 * buffered whole), 400 naming the first bad field or line. Returns the normalized submission and
 * the locator the writer names its items with.
 */
export async function readSubmission(
  req: Request,
  config: FlotillaConfig,
): Promise<{ input: BatchSubmission; locator: Locator }> {
  assertBatchesEnabled(config);
  const format = submissionFormat(req.headers.get("content-type"));
  const params = new URL(req.url).searchParams;
  const firstParam = [...params.keys()][0];
  if (format === "json" && firstParam !== undefined)
    throw refusal({ field: firstParam, message: "query parameters are only read with an application/x-ndjson or text/csv body" });
  const text = await readBodyText(req, config.http.max_body_bytes);
  const limits = submissionLimits(config.subagent_batches);
  if (format === "json") return { input: parseJsonSubmission(text, limits), locator: jsonLocator };
  return parseUpload(format, text, params, limits);
}
