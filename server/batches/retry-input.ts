import { and, eq, ne, sql } from "drizzle-orm";
import {
  ITEM_PLACEHOLDER,
  isProblem,
  itemsProblem,
  type Locator,
  parseItem,
  problemText,
  submissionLimits,
  totalProblem,
} from "@/lib/batch-rules";
import type { FlotillaConfig } from "@/lib/config";
import { inputFields } from "@/lib/result-columns";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatchItems } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import type { ItemRow } from "./insert-items";
import { specColumns } from "./spec";
import { itemRows } from "./submit";
import type { BatchRow } from "./types";

/**
 * An item retried with a corrected input: the input checked as a submission item of its batch
 * would be (lib/batch-rules.ts, the same messages under `input`), and the prompt rebuilt the way
 * the submission built it (submit.ts itemRows): a string fills the batch's prompt_template (kept
 * in the execution spec), an object of fields fills its {{field}}s and brings its `expected`, an
 * explicit `{ prompt }` is the prompt. A batch that kept no template (over files,
 * compatible APIs, or older than the field) takes a string only when its item's prompt was its
 * input (no template was applied), and otherwise only an explicit prompt.
 */

/** Refusals name the body's field: `input`, `input.prompt`, ... */
const inputLocator: Locator = { item: () => "input", field: (_i, f) => `input.${f}` };

function refuse(message: string): AppError {
  return new AppError("validation_failed", `input: ${message}`);
}

export function correctedItem(
  batch: Pick<BatchRow, "executionSpec">,
  item: { itemKey: string; prompt: string; input: string },
  value: unknown,
  config: FlotillaConfig,
): Pick<ItemRow, "prompt" | "input" | "expected"> {
  const spec = batch.executionSpec as { kind?: unknown; prompt_template?: unknown };
  if (spec.kind !== undefined && spec.kind !== "subagent")
    throw refuse("an item of a batch submitted through the compatible APIs takes no corrected input; submit a new batch");
  const parsed = parseItem(value, 0);
  if (isProblem(parsed)) throw new AppError("validation_failed", problemText(parsed, inputLocator));
  if (typeof parsed !== "string" && parsed.item_key !== undefined && parsed.item_key !== item.itemKey)
    throw new AppError("validation_failed", `input.item_key: must be this item's key ${JSON.stringify(item.itemKey)} (or left out)`);
  const template = typeof spec.prompt_template === "string" ? spec.prompt_template : undefined;
  if (typeof parsed === "string" && template === undefined && item.prompt !== item.input)
    throw refuse("this batch kept no prompt template to rebuild this item's prompt from; send { prompt } instead");
  const problem = itemsProblem([parsed], template, submissionLimits(config.subagent_batches));
  if (problem) {
    // A problem of the batch's template (a string for a template of fields) still names the input.
    const text = problem.item === undefined ? `input: ${problemText(problem)}` : problemText(problem, inputLocator);
    throw new AppError(problem.tooLarge ? "payload_too_large" : "validation_failed", text);
  }
  const [row] = itemRows([parsed], template);
  return { prompt: row!.prompt, input: row!.input, expected: row!.expected };
}

/**
 * The batch's prompts, the corrected one in place of the item's, still total at most
 * subagent_batches.max_total_prompt_chars (413 naming `input`, as a submission is refused). Only
 * a longer prompt can pass it, so only then are the other items' prompts summed.
 */
export async function assertCorrectedTotal(
  tx: DbOrTx,
  args: { batchId: string; itemId: string; before: string; after: string; config: FlotillaConfig },
): Promise<void> {
  if (args.after.length <= args.before.length) return;
  const i = subagentBatchItems;
  const [others] = await tx
    .select({ chars: sql<string>`coalesce(sum(length(${i.prompt})), 0)` })
    .from(i)
    .where(and(eq(i.batchId, args.batchId), ne(i.id, args.itemId)));
  const total = Number(others?.chars ?? 0) + args.after.length;
  const problem = totalProblem(total, submissionLimits(args.config.subagent_batches), "input");
  if (problem) throw new AppError("payload_too_large", problemText(problem));
}

/**
 * What "Edit input and retry" starts from: the item as a corrected input would send it back
 * (correctedItem reads it the same way). An object item is its fields with its `expected`, so
 * a retry keeps what the checks compare with; an explicit prompt in a batch with a template is
 * `{ prompt }`, which the template is not filled around again; else the whole input text.
 */
export function editableInput(
  batch: Pick<BatchRow, "executionSpec">,
  item: { prompt: string; input: string; expected: unknown },
): unknown {
  const fields = specColumns(batch).inputFields.length > 0 ? inputFields(item.input) : null;
  if (fields) return item.expected === null || item.expected === undefined ? fields : { ...fields, expected: item.expected };
  const template = (batch.executionSpec as { prompt_template?: unknown }).prompt_template;
  if (typeof template === "string" && template !== ITEM_PLACEHOLDER && item.prompt === item.input) return { prompt: item.input };
  return item.input;
}
