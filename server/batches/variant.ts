import { and, asc, eq, inArray, type SQL } from "drizzle-orm";
import type { SubmitBatchInput } from "@/lib/api/batches";
import type { VariantRequest } from "@/lib/api/variants";
import type { FlotillaConfig } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatchItems } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { findCatalogEntry } from "@/server/models/catalog";
import { type BatchScopeArgs, getBatch } from "./owned";
import type { BatchRow } from "./types";

/**
 * A variant's submission, built from its original (DESIGN "Judging a batch"): the original's
 * items (keys, fields, expected) in their order, or those `only` picks, and every setting the
 * request does not change. It then goes through the submission's own door (submitBatch), so it
 * is checked exactly as a submission and written in one transaction.
 */

export interface VariantPlan {
  original: BatchRow;
  input: SubmitBatchInput;
  /** The keys of string items (a string carries none of its own). */
  itemKeys: string[];
  /** The catalog model every item runs on: the request's, else the original's. */
  model: string;
}

interface Spec {
  kind?: string;
  prompt_template?: string | null;
  input_fields?: string[];
  output_schema?: unknown;
  checks?: unknown[];
  tool_groups?: string[];
  model?: { name?: string };
}

export async function planVariant(db: DbOrTx, args: BatchScopeArgs & { request: VariantRequest; config: FlotillaConfig }): Promise<VariantPlan> {
  const { request } = args;
  const original = await getBatch(db, args);
  const spec = original.executionSpec as Spec;
  if (spec.kind !== undefined && spec.kind !== "subagent")
    throw new AppError("validation_failed", "batch: a batch submitted through the compatible APIs has no variants; submit a new batch");
  const template = request.prompt_template ?? spec.prompt_template ?? undefined;
  const fields = spec.input_fields ?? [];
  if (template === undefined && fields.length === 0 && (spec.tool_groups ?? []).includes("workspace"))
    throw new AppError("validation_failed", "batch: a batch over files has no variants yet; submit its glob again with the changed settings");
  const model = request.model ?? spec.model?.name ?? "simulator";
  if (!findCatalogEntry(args.config, model))
    throw new AppError("validation_failed", `model: unknown model "${model}" (not in the model catalog)`);

  const i = subagentBatchItems;
  const where: (SQL | undefined)[] = [eq(i.batchId, original.id)];
  if (request.only?.status) where.push(inArray(i.status, request.only.status));
  if (request.only?.verdict) where.push(eq(i.verdict, request.only.verdict));
  const rows = await db
    .select({ key: i.itemKey, input: i.input, prompt: i.prompt, expected: i.expected })
    .from(i)
    .where(and(...where))
    .orderBy(asc(i.position));
  if (rows.length === 0) throw new AppError("validation_failed", "only: matches no item of this batch");

  const itemKeys: string[] = [];
  const items = rows.map((row) => {
    itemKeys.push(row.key);
    // Object items keep their fields (stored as their JSON) and expected value.
    if (fields.length > 0) {
      const item: Record<string, unknown> = { item_key: row.key, ...(JSON.parse(row.input) as Record<string, unknown>) };
      if (row.expected !== null) item.expected = row.expected;
      return item;
    }
    // A string filled the original's template; without one, the prompt was given as it is.
    if (spec.prompt_template) return row.input;
    return { item_key: row.key, prompt: row.prompt };
  }) as SubmitBatchInput["items"];

  const input: SubmitBatchInput = {
    submission_key: request.submission_key,
    subagent: request.subagent ?? original.subagent,
    items,
    ...(template === undefined ? {} : { prompt_template: template }),
    max_live_items: original.maxLiveItems,
    max_running_items: request.max_running_items ?? original.maxRunningItems,
    ...(original.maxTotalTokens === null ? {} : { max_total_tokens: original.maxTotalTokens }),
    ...(original.maxCostUsd === null ? {} : { max_cost_usd: original.maxCostUsd }),
  };
  const outputSchema = request.output_schema ?? spec.output_schema;
  if (outputSchema !== undefined && outputSchema !== null) input.output_schema = outputSchema as SubmitBatchInput["output_schema"];
  const checks = request.checks ?? spec.checks;
  if (checks && checks.length > 0) input.checks = checks as SubmitBatchInput["checks"];
  return { original, input, itemKeys, model };
}
