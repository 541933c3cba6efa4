import "server-only";
import { z } from "zod";
import { type SubmitBatchInput, submissionFieldsShape, submitBatchSchema } from "@/lib/api/batches";
import { type BatchSubmission, submitFileBatchSchema } from "@/lib/api/files";
import {
  issueProblem,
  isProblem,
  jsonLocator,
  type Locator,
  lineLocator,
  PROMPT_TEMPLATE_MAX_CHARS,
  parseItem,
  type SubmitItem,
  type SubmissionLimits,
  submissionLimits,
  submissionProblem,
  windowProblem,
} from "@/lib/batch-rules";
import type { FlotillaConfig } from "@/lib/config";
import { refusal } from "@/server/batches/submit";
import { AppError } from "@/server/errors";
import { readBodyText } from "./route";

/**
 * The HTTP door into a batch: a JSON body (`submitBatchSchema`, or a `files` glob) or an
 * `application/x-ndjson` upload of items with the other fields as query parameters. It parses
 * the envelope into the normalized submission plus a locator (`items.3` / `line 4`) and checks
 * it with the shared rules (lib/batch-rules.ts) so an upload fails fast on its first bad line;
 * the writer (server/batches/submit.ts) applies the same rules, with the same locator, to
 * everything else (sub-agent, bounds, quotas).
 */


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
  if (!envelope.success) throw refusal(issueProblem(envelope.error.issues));
  const { items: rawItems, ...rest } = envelope.data;
  if (rawItems.length > limits.maxItems)
    throw refusal({ field: "items", message: `at most ${limits.maxItems} items per batch (got ${rawItems.length})` });
  const items = rawItems.map((raw, index) => {
    const item = parseItem(raw, index);
    if (isProblem(item)) throw refusal(item);
    return item;
  });
  const input = { ...rest, items };
  const problem = submissionProblem(input, limits);
  if (problem) throw refusal(problem);
  return input;
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

/** Query parameters of an NDJSON upload: the JSON door's fields, with numbers arriving as text. */
const positiveIntParam = z
  .string()
  .regex(/^\d+$/, "must be a positive whole number")
  .transform(Number)
  .pipe(submissionFieldsShape.max_total_tokens.unwrap());
const positiveNumberParam = z
  .string()
  .regex(/^\d+(\.\d+)?$/, "must be a positive number")
  .transform(Number)
  .pipe(submissionFieldsShape.max_cost_usd.unwrap());
const ndjsonParamsSchema = z
  .object({
    submission_key: submissionFieldsShape.submission_key,
    subagent: submissionFieldsShape.subagent,
    prompt_template: z
      .string()
      .min(1, "must not be empty")
      .max(PROMPT_TEMPLATE_MAX_CHARS, `must be at most ${PROMPT_TEMPLATE_MAX_CHARS} characters`)
      .optional(),
    max_live_items: positiveIntParam.optional(),
    max_running_items: positiveIntParam.optional(),
    max_total_tokens: positiveIntParam.optional(),
    max_cost_usd: positiveNumberParam.optional(),
  })
  .strict();

export function parseNdjsonSubmission(text: string, params: URLSearchParams, limits: SubmissionLimits): SubmitBatchInput {
  return parseNdjsonLines(text, params, limits).input;
}

/** The submission plus its locator: the physical line of every item. */
function parseNdjsonLines(
  text: string,
  params: URLSearchParams,
  limits: SubmissionLimits,
): { input: SubmitBatchInput; locator: Locator } {
  const query: Record<string, string> = {};
  for (const [name, value] of params) {
    if (name in query) throw refusal({ field: name, message: "given more than once" });
    query[name] = value;
  }
  const parsedQuery = ndjsonParamsSchema.safeParse(query);
  if (!parsedQuery.success) {
    const issue = parsedQuery.error.issues[0];
    // A strict object reports unknown keys at the root; name them like any other field.
    if (issue?.code === "unrecognized_keys") throw refusal({ field: issue.keys[0], message: "unknown query parameter" });
    throw refusal(issueProblem(parsedQuery.error.issues));
  }

  const items: SubmitItem[] = [];
  const lineOf: number[] = [];
  const locator = lineLocator(lineOf);
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.replace(/\r$/, "");
    if (line.trim() === "") continue;
    const where = `line ${i + 1}`;
    // Stop reading at the first line past the bound.
    if (items.length === limits.maxItems) throw refusal({ message: `${where}: at most ${limits.maxItems} items per batch` });
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw refusal({ message: `${where}: not valid JSON` });
    }
    lineOf.push(i + 1);
    const item = parseItem(value, items.length);
    if (isProblem(item)) throw refusal(item, locator);
    items.push(item);
  }
  if (items.length === 0)
    throw refusal({ field: "items", message: "must contain at least one item (one JSON string or object per line)" });
  const input = { ...parsedQuery.data, items };
  const problem = submissionProblem(input, limits);
  if (problem) throw refusal(problem, locator);
  return { input, locator };
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
  if (!config.subagent_batches.enabled)
    throw new AppError("unavailable", "durable batches are disabled on this server (subagent_batches.enabled is false)");
  const format = submissionFormat(req.headers.get("content-type"));
  const params = new URL(req.url).searchParams;
  const firstParam = [...params.keys()][0];
  if (format === "json" && firstParam !== undefined)
    throw refusal({ field: firstParam, message: "query parameters are only read with an application/x-ndjson body" });
  const text = await readBodyText(req, config.http.max_body_bytes);
  const limits = submissionLimits(config.subagent_batches);
  if (format === "json") return { input: parseJsonSubmission(text, limits), locator: jsonLocator };
  return parseNdjsonLines(text, params, limits);
}
