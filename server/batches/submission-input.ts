import { z } from "zod";
import { type SubmitBatchInput, submitBatchSchema } from "@/lib/api/batches";
import { type BatchSubmission, isFileSubmission, type SubmitFileBatchInput, submitFileBatchSchema } from "@/lib/api/files";
import type { FlotillaConfig } from "@/lib/config";
import { getSubagentDefinition } from "@/server/agent/registry";
import { AppError } from "@/server/errors";
import { readBodyText, zodMessage } from "@/server/http/route";
import { normalizeSubmission } from "./validate";

/**
 * Parses a batch submission from an HTTP body: JSON (`submitBatchSchema`) or an
 * `application/x-ndjson` upload of items with the other fields as query parameters.
 * Everything — shape, duplicates, limits — is checked here, before the repository writes
 * anything, and the first problem is named by field (JSON) or by line (NDJSON).
 */

export interface SubmissionLimits {
  maxItems: number;
  maxLiveItems: number;
  maxRunningItems: number;
}

export function submissionLimits(config: FlotillaConfig): SubmissionLimits {
  const b = config.subagent_batches;
  return {
    maxItems: b.max_items_per_batch,
    maxLiveItems: b.max_live_items_per_batch,
    maxRunningItems: b.max_running_items_per_batch,
  };
}

export type SubmissionFormat = "json" | "ndjson";

const NDJSON_TYPES = new Set(["application/x-ndjson", "application/jsonl", "application/x-jsonlines"]);

/** JSON when the type says so (or says nothing, as some clients do); NDJSON for the line formats; anything else 415. */
export function submissionFormat(contentType: string | null): SubmissionFormat {
  const type = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  if (type === "" || type === "application/json") return "json";
  if (NDJSON_TYPES.has(type)) return "ndjson";
  throw new AppError(
    "unsupported_media_type",
    `content type ${type} is not supported; send application/json or application/x-ndjson`,
  );
}

const itemObjectSchema = z
  .object({
    item_key: z.string().min(1, "must not be empty").max(200, "must be at most 200 characters").optional(),
    prompt: z.string().min(1, "must not be empty"),
  })
  .strict();

type SubmitItem = SubmitBatchInput["items"][number];

/** Validates one item; `where` names it in errors ("items.3" or "line 4"). */
function parseItem(value: unknown, where: string, separator: string): SubmitItem {
  if (typeof value === "string") {
    if (value.length === 0) throw new AppError("validation_failed", `${where}: must not be empty`);
    return value;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    throw new AppError("validation_failed", `${where}: expected a string or an object {item_key?, prompt}`);
  // The common shape passes without zod (half an NDJSON upload's parse time); anything else
  // goes through the schema, which names the problem.
  if (isPlainItem(value)) return value;
  const parsed = itemObjectSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = (issue?.path ?? []).join(".");
    throw new AppError("validation_failed", `${where}${field ? `${separator}${field}` : ""}: ${issue?.message}`);
  }
  return parsed.data;
}

/** What itemObjectSchema accepts, checked by hand: only item_key (1..200 characters) and a non-empty prompt. */
function isPlainItem(value: object): value is { item_key?: string; prompt: string } {
  let keys = 0;
  for (const key in value) {
    if (key !== "item_key" && key !== "prompt") return false;
    keys++;
  }
  const { item_key: key, prompt } = value as { item_key?: unknown; prompt?: unknown };
  if (typeof prompt !== "string" || prompt.length === 0) return false;
  return key === undefined ? keys === 1 : typeof key === "string" && key.length >= 1 && key.length <= 200;
}

/** Same rules as the batch engine: explicit keys win, the rest are item-1, item-2, ... by position. */
function itemKey(item: SubmitItem, index: number): string {
  return typeof item === "string" || item.item_key === undefined ? `item-${index + 1}` : item.item_key;
}

function checkWindow(input: { max_live_items?: number; max_running_items?: number }, limits: SubmissionLimits): void {
  if (input.max_live_items !== undefined && input.max_live_items > limits.maxLiveItems)
    throw new AppError("validation_failed", `max_live_items: must be at most ${limits.maxLiveItems}`);
  if (input.max_running_items !== undefined && input.max_running_items > limits.maxRunningItems)
    throw new AppError("validation_failed", `max_running_items: must be at most ${limits.maxRunningItems}`);
}

function checkCommon(
  input: Omit<SubmitBatchInput, "items">,
  items: SubmitItem[],
  limits: SubmissionLimits,
  where: (index: number) => string,
): void {
  checkWindow(input, limits);
  if (input.prompt_template !== undefined && !input.prompt_template.includes("{{item}}"))
    throw new AppError("validation_failed", "prompt_template: must contain {{item}}");
  const seen = new Map<string, number>();
  items.forEach((item, index) => {
    const key = itemKey(item, index);
    const first = seen.get(key);
    if (first !== undefined)
      throw new AppError("validation_failed", `${where(index)}: duplicate item_key "${key}" (first used by ${where(first)})`);
    seen.set(key, index);
  });
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
  if (value !== null && typeof value === "object" && "files" in value) return parseFileSubmission(value, limits);
  const envelope = jsonEnvelopeSchema.safeParse(value);
  if (!envelope.success) throw new AppError("validation_failed", zodMessage(envelope.error));
  const { items: rawItems, ...rest } = envelope.data;
  if (rawItems.length > limits.maxItems)
    throw new AppError("validation_failed", `items: at most ${limits.maxItems} items per batch (got ${rawItems.length})`);
  const items = rawItems.map((raw, index) => parseItem(raw, `items.${index}`, "."));
  checkCommon(rest, items, limits, (index) => `items.${index}`);
  return { ...rest, items };
}

/** A batch over workspace files: a glob instead of items (expanded against the thread when written). */
function parseFileSubmission(value: object, limits: SubmissionLimits): SubmitFileBatchInput {
  if ("items" in value) throw new AppError("validation_failed", "files: send either items or files, not both");
  const parsed = submitFileBatchSchema.safeParse(value);
  if (!parsed.success) throw new AppError("validation_failed", zodMessage(parsed.error));
  checkWindow(parsed.data, limits);
  return parsed.data;
}

/** Query parameters of an NDJSON upload; numbers arrive as text. */
const positiveIntParam = z
  .string()
  .regex(/^\d+$/, "must be a positive whole number")
  .transform(Number)
  .pipe(z.number().int().positive("must be a positive whole number").max(Number.MAX_SAFE_INTEGER));
const positiveNumberParam = z
  .string()
  .regex(/^\d+(\.\d+)?$/, "must be a positive number")
  .transform(Number)
  .pipe(z.number().positive("must be a positive number").max(1_000_000_000));
const ndjsonParamsSchema = z
  .object({
    submission_key: z.string().min(1, "must not be empty").max(200, "must be at most 200 characters"),
    subagent: z.string().min(1, "must not be empty").max(40, "must be at most 40 characters").optional(),
    prompt_template: z.string().min(1, "must not be empty").max(20_000, "must be at most 20000 characters").optional(),
    max_live_items: positiveIntParam.optional(),
    max_running_items: positiveIntParam.optional(),
    max_total_tokens: positiveIntParam.optional(),
    max_cost_usd: positiveNumberParam.optional(),
  })
  .strict();

export function parseNdjsonSubmission(text: string, params: URLSearchParams, limits: SubmissionLimits): SubmitBatchInput {
  return parseNdjsonLines(text, params, limits).input;
}

/** The submission plus the physical line number of every item (to name lines in later errors). */
function parseNdjsonLines(
  text: string,
  params: URLSearchParams,
  limits: SubmissionLimits,
): { input: SubmitBatchInput; lineOf: number[] } {
  const query: Record<string, string> = {};
  for (const [name, value] of params) {
    if (name in query) throw new AppError("validation_failed", `${name}: given more than once`);
    query[name] = value;
  }
  const parsedQuery = ndjsonParamsSchema.safeParse(query);
  if (!parsedQuery.success) {
    const issue = parsedQuery.error.issues[0];
    // A strict object reports unknown keys at the root; name them like any other field.
    if (issue?.code === "unrecognized_keys")
      throw new AppError("validation_failed", `${issue.keys[0]}: unknown query parameter`);
    throw new AppError("validation_failed", zodMessage(parsedQuery.error));
  }

  const items: SubmitItem[] = [];
  const lineOf: number[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\r$/, "");
    if (line.trim() === "") continue;
    const where = `line ${i + 1}`;
    if (items.length === limits.maxItems)
      throw new AppError("validation_failed", `${where}: at most ${limits.maxItems} items per batch`);
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw new AppError("validation_failed", `${where}: not valid JSON`);
    }
    items.push(parseItem(value, where, ": "));
    lineOf.push(i + 1);
  }
  if (items.length === 0)
    throw new AppError("validation_failed", "items: must contain at least one item (one JSON string or object per line)");
  checkCommon(parsedQuery.data, items, limits, (index) => `line ${lineOf[index]}`);
  return { input: { ...parsedQuery.data, items }, lineOf };
}

/**
 * Reads and validates a submission request: 415 for other content types, 413 past
 * http.max_body_bytes (never buffered whole), 400 naming the first bad field or line. The
 * batch engine's own rules (prompt length after template expansion, sub-agent name) run here
 * too, so an upload's error names its line; the repository checks them again when it writes.
 */
export async function readSubmission(req: Request, config: FlotillaConfig): Promise<BatchSubmission> {
  if (!config.subagent_batches.enabled)
    throw new AppError("unavailable", "durable batches are disabled on this server (subagent_batches.enabled is false)");
  const format = submissionFormat(req.headers.get("content-type"));
  const params = new URL(req.url).searchParams;
  const firstParam = [...params.keys()][0];
  if (format === "json" && firstParam !== undefined)
    throw new AppError("validation_failed", `${firstParam}: query parameters are only read with an application/x-ndjson body`);
  const text = await readBodyText(req, config.http.max_body_bytes);
  const limits = submissionLimits(config);
  if (format === "json") {
    const input = parseJsonSubmission(text, limits);
    checkEngineRules(input, config, (message) => message);
    return input;
  }
  const { input, lineOf } = parseNdjsonLines(text, params, limits);
  checkEngineRules(input, config, (message) =>
    message.replace(/^items\.(\d+)(\.[a-z_]+)?:/, (_m, index: string) => `line ${lineOf[Number(index)] ?? "?"}:`),
  );
  return input;
}

function checkEngineRules(input: BatchSubmission, config: FlotillaConfig, rename: (message: string) => string): void {
  try {
    // File items exist only once the glob is matched against the thread (when the batch is written).
    if (isFileSubmission(input)) getSubagentDefinition(input.subagent ?? "general", config);
    else getSubagentDefinition(normalizeSubmission(input, config).subagent, config);
  } catch (err) {
    if (err instanceof AppError) throw new AppError(err.code, rename(err.message));
    throw err;
  }
}
