import { z } from "zod";

/** A person's review of a batch item (DESIGN "Judging a batch"). */
export const REVIEW_STATES = ["pending", "accepted", "rejected"] as const;
export const reviewStateSchema = z.enum(REVIEW_STATES, { error: 'must be "pending", "accepted" or "rejected"' });
export type ReviewState = z.infer<typeof reviewStateSchema>;

export const REVIEW_NOTE_MAX_CHARS = 4_000;

/** An item's review as its projection carries it: null until queued or decided. */
export const itemReviewSchema = z
  .object({
    state: reviewStateSchema,
    note: z.string().optional(),
    /** A corrected answer is kept beside the model's (reviewed_output in exports). */
    corrected: z.boolean(),
    reviewed_at: z.string().optional(),
    /** Name it in a decision: a stale one is refused (409). */
    version: z.number(),
  })
  .strict();
export type ItemReview = z.infer<typeof itemReviewSchema>;

/** POST .../items/{item_id}/review: queue it by hand, or decide. */
export const reviewRequestSchema = z.union(
  [
    z.object({ request: z.literal(true) }).strict(),
    z
      .object({
        decision: z.enum(["accept", "reject"], { error: 'must be "accept" or "reject"' }),
        note: z.string().max(REVIEW_NOTE_MAX_CHARS, `must be at most ${REVIEW_NOTE_MAX_CHARS} characters`).optional(),
        /** A corrected answer, checked against the batch's output_schema. */
        output: z.unknown().optional(),
        version: z.number({ error: "must be the review's version (a whole number)" }).int("must be a whole number").min(0),
      })
      .strict(),
  ],
  { error: "expected { request: true } or { decision, note?, output?, version }" },
);
export type ReviewRequest = z.infer<typeof reviewRequestSchema>;

/** A batch's reviews: how many wait and how many were decided each way. */
export const batchReviewsSchema = z.object({ pending: z.number(), accepted: z.number(), rejected: z.number() }).strict();
