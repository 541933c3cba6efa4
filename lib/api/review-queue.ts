import { z } from "zod";
import { checkResultSchema, verdictSchema } from "./batch-data";
import { itemStatusSchema } from "./batches";
import { itemReviewSchema } from "./reviews";

/** One entry of a person's review queue (GET /api/reviews): the item with what a reviewer reads. */
export const reviewEntrySchema = z
  .object({
    batch_id: z.string(),
    /** The batch as people pick it out: its prompt template's first line (else its sub-agent). */
    batch_title: z.string(),
    thread_id: z.string(),
    thread_title: z.string(),
    item_id: z.string(),
    item_key: z.string(),
    input: z.string(),
    expected: z.unknown().optional(),
    status: itemStatusSchema,
    /** The typed answer, else the text answer. */
    output: z.unknown(),
    reviewed_output: z.unknown().optional(),
    checks: z.array(checkResultSchema),
    verdict: verdictSchema.nullable(),
    error: z.string().nullable(),
    review: itemReviewSchema,
    /** The batch's output_schema, for editing the answer (null: a text answer). */
    output_schema: z.unknown(),
    requested_at: z.string(),
  })
  .strict();
export type ReviewEntry = z.infer<typeof reviewEntrySchema>;

export const reviewPageSchema = z
  .object({ items: z.array(reviewEntrySchema), next_cursor: z.string().nullable(), pending: z.number() })
  .strict();
export type ReviewPage = z.infer<typeof reviewPageSchema>;

