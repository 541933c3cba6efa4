import { z } from "zod";
import { SUBAGENT_NAME_MAX_CHARS } from "@/lib/batch-rules";
import { goldenSetRefSchema, goldenSetRunSchema } from "./golden-sets";
import { checkSchema, outputSchemaSchema, verdictSchema } from "./batch-data";
import { examplesSchema } from "./golden-sets";
import { itemStatusSchema, promptTemplateSchema, reviewPolicySchema, submissionFieldsShape, submitChecksSchema, submitOutputSchemaSchema } from "./batches";

/**
 * POST .../subagent-batches/{id}/variant: the same items (keys, fields, expected) run again with
 * what is given changed; every other setting as the original's (its review policy too, never its
 * reviews). `output_schema: null` and `review: null` drop the original's; `checks: []` drops its
 * checks. `only` picks the items by how they ended in the original.
 */
export const variantRequestSchema = z
  .object({
    submission_key: submissionFieldsShape.submission_key,
    prompt_template: promptTemplateSchema.optional(),
    /** A catalog model name for every item (wins over the sub-agent definition's model). */
    model: z.string().min(1, "must not be empty").max(100, "must be at most 100 characters").optional(),
    subagent: z.string().min(1, "must not be empty").max(SUBAGENT_NAME_MAX_CHARS, `must be at most ${SUBAGENT_NAME_MAX_CHARS} characters`).optional(),
    output_schema: submitOutputSchemaSchema.nullable().optional(),
    checks: submitChecksSchema.optional(),
    /** Run on this golden set (its items and the check "golden"); default the original's; null: the original's items, without it. */
    golden_set: goldenSetRefSchema.nullable().optional(),
    review: reviewPolicySchema.nullable().optional(),
    max_running_items: submissionFieldsShape.max_running_items,
    pilot: submissionFieldsShape.pilot,
    /** Default: the original's lane. */
    lane: submissionFieldsShape.lane,
    /** Default: the original's examples; null drops them. */
    examples: examplesSchema.nullable().optional(),
    only: z
      .object({
        status: z.array(itemStatusSchema).min(1, "must name at least one status").max(8).optional(),
        verdict: verdictSchema.optional(),
      })
      .strict()
      .optional(),
  })
  .strict();
export type VariantRequest = z.infer<typeof variantRequestSchema>;

/**
 * GET .../subagent-batches/{id}/variant: the settings a variant of this batch starts from (the
 * New batch dialog opens prefilled with them), and the model catalog's names to choose from.
 */
export const variantDraftSchema = z
  .object({
    subagent: z.string(),
    model: z.string(),
    /** null: the items were explicit prompts (or files), not a template's fill. */
    prompt_template: z.string().nullable(),
    output_schema: outputSchemaSchema.nullable(),
    checks: z.array(checkSchema),
    /** The golden set the batch ran on (a variant runs on it too unless it names another, or null). */
    golden_set: goldenSetRunSchema.nullable(),
    max_running_items: z.number(),
    /** Its review policy (null: none). */
    review: reviewPolicySchema.nullable(),
    /** Its examples, their version pinned (null or absent: none). */
    examples: examplesSchema.extend({ version: z.number() }).nullable().optional(),
    models: z.array(z.string()),
  })
  .strict();
export type VariantDraft = z.infer<typeof variantDraftSchema>;
