import { z } from "zod";
import { SUBAGENT_NAME_MAX_CHARS } from "@/lib/batch-rules";
import { verdictSchema } from "./batch-data";
import { itemStatusSchema, promptTemplateSchema, submissionFieldsShape, submitChecksSchema, submitOutputSchemaSchema } from "./batches";

/**
 * POST .../subagent-batches/{id}/variant: the same items (keys, fields, expected) run again with
 * what is given changed; every other setting as the original's. `only` picks the items by how
 * they ended in the original.
 */
export const variantRequestSchema = z
  .object({
    submission_key: submissionFieldsShape.submission_key,
    prompt_template: promptTemplateSchema.optional(),
    /** A catalog model name for every item (wins over the sub-agent definition's model). */
    model: z.string().min(1, "must not be empty").max(100, "must be at most 100 characters").optional(),
    subagent: z.string().min(1, "must not be empty").max(SUBAGENT_NAME_MAX_CHARS, `must be at most ${SUBAGENT_NAME_MAX_CHARS} characters`).optional(),
    output_schema: submitOutputSchemaSchema.optional(),
    checks: submitChecksSchema.optional(),
    max_running_items: submissionFieldsShape.max_running_items,
    pilot: submissionFieldsShape.pilot,
    /** Default: the original's lane. */
    lane: submissionFieldsShape.lane,
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
