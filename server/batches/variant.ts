import { and, asc, eq, inArray, type SQL } from "drizzle-orm";
import type { SubmitBatchInput } from "@/lib/api/batches";
import type { SubmitGoldenBatchInput } from "@/lib/api/files";
import type { VariantRequest } from "@/lib/api/variants";
import type { FlotillaConfig } from "@/lib/config";
import type { DbOrTx } from "@/server/db/client";
import { subagentBatchItems } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { findCatalogEntry } from "@/server/models/catalog";
import { type BatchScopeArgs, getBatch } from "./owned";
import type { SpecDefinition, SubmissionOrigin } from "./spec";
import type { SubmitBatchArgs } from "./submit";

/**
 * A variant's submission, built from its original (DESIGN "Judging a batch"): the original's
 * items (keys, fields, expected) in their order, or those `only` picks, and every setting the
 * request does not change (the review policy included; the reviews are the original's alone). It then goes through the submission's own door (submitBatch), so it
 * is checked exactly as a submission and written in one transaction. Both doors that make
 * variants (the variant route, the lead's batch_task with variant_of) plan them here.
 */

export interface VariantDoor extends BatchScopeArgs {
  request: VariantRequest;
  config: FlotillaConfig;
  /**
   * The door's resolution of a sub-agent name (server/agent/registry.ts batchSubagent, which
   * sits above this layer): its definition and the allowlist it was checked against.
   */
  resolveSubagent: (name: string) => { definition: SpecDefinition; allowedSubagents: string[] };
  origin?: SubmissionOrigin;
}

/** The writer's arguments for a variant: its submission, on its sub-agent with its model, and the batch it re-runs. */
export type VariantSubmission = SubmitBatchArgs & { input: SubmitBatchInput | SubmitGoldenBatchInput; variant: NonNullable<SubmitBatchArgs["variant"]> };

interface Spec {
  kind?: string;
  prompt_template?: string | null;
  input_fields?: string[];
  output_schema?: unknown;
  checks?: { type?: string }[];
  golden_set?: { id: string; version: number } | null;
  tool_groups?: string[];
  model?: { name?: string };
  lane?: "live" | "provider_batch";
  examples?: { golden_set: string; version: number; count: number } | null;
}

export async function planVariant(db: DbOrTx, args: VariantDoor): Promise<VariantSubmission> {
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

  // A golden run's variant runs on the same set and version unless the request names another (or null).
  const golden = request.golden_set === undefined ? (spec.golden_set ?? undefined) : (request.golden_set ?? undefined);
  if (golden && request.only) throw new AppError("validation_failed", "only: a run against a golden set takes the set's items; omit only (or set golden_set: null)");
  const itemKeys: string[] = [];
  const items = golden ? undefined : await originalItems(db, { batchId: original.id, request, spec, itemKeys });

  const subagentName = request.subagent ?? original.subagent;
  const input = {
    submission_key: request.submission_key,
    subagent: subagentName,
    ...(golden ? { golden_set: golden } : { items: items! }),
    ...(template === undefined ? {} : { prompt_template: template }),
    max_live_items: original.maxLiveItems,
    max_running_items: request.max_running_items ?? original.maxRunningItems,
    ...(original.maxTotalTokens === null ? {} : { max_total_tokens: original.maxTotalTokens }),
    ...(original.maxCostUsd === null ? {} : { max_cost_usd: original.maxCostUsd }),
    // The original's pilot is not copied: it is cleared once the person resumes past it.
    ...(request.pilot === undefined ? {} : { pilot: request.pilot }),
    lane: request.lane ?? spec.lane ?? "live",
  } as SubmitBatchInput | SubmitGoldenBatchInput;
  const outputSchema = request.output_schema === undefined ? spec.output_schema : request.output_schema;
  if (outputSchema !== undefined && outputSchema !== null) input.output_schema = outputSchema as SubmitBatchInput["output_schema"];
  // The golden set's check is not copied: it comes with golden_set.
  const checks = request.checks ?? spec.checks?.filter((c) => c.type !== "golden");
  if (checks && checks.length > 0) input.checks = checks as SubmitBatchInput["checks"];
  const review =
    request.review === undefined
      ? original.reviewWhen && { when: original.reviewWhen, ...(original.reviewRate === null ? {} : { rate: original.reviewRate }) }
      : request.review;
  if (review) input.review = review;
  // The original's examples at the version it ran with, unless changed (null drops them).
  const originalExamples = spec.examples && { golden_set: spec.examples.golden_set, version: spec.examples.version, count: spec.examples.count };
  const examples = request.examples === undefined ? originalExamples : request.examples;
  if (examples) input.examples = examples;
  const subagent = args.resolveSubagent(subagentName);
  return {
    userId: args.userId,
    threadId: args.threadId,
    input,
    config: args.config,
    // Every item runs on the variant's model: as the definition's own, it wins over the caller's (spec.ts).
    definition: { ...subagent.definition, model },
    allowedSubagents: subagent.allowedSubagents,
    ...(args.origin ? { origin: args.origin } : {}),
    variant: { of: original.id, itemKeys },
  };
}

/** The original's items (keys, fields, expected) in their order, or those `only` picks; their keys go into itemKeys. */
async function originalItems(
  db: DbOrTx,
  args: { batchId: string; request: VariantRequest; spec: Spec; itemKeys: string[] },
): Promise<SubmitBatchInput["items"]> {
  const { request, spec, itemKeys } = args;
  const fields = spec.input_fields ?? [];
  const i = subagentBatchItems;
  const where: (SQL | undefined)[] = [eq(i.batchId, args.batchId)];
  if (request.only?.status) where.push(inArray(i.status, request.only.status));
  if (request.only?.verdict) where.push(eq(i.verdict, request.only.verdict));
  const rows = await db
    .select({ key: i.itemKey, input: i.input, prompt: i.prompt, expected: i.expected })
    .from(i)
    .where(and(...where))
    .orderBy(asc(i.position));
  if (rows.length === 0) throw new AppError("validation_failed", "only: matches no item of this batch");

  return rows.map((row) => {
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
}
