import { z } from "zod";
import { checkResultSchema, verdictSchema } from "./batch-data";
import { batchStatusSchema, itemStatusSchema } from "./batches";

/**
 * Two batches of one owner compared item by item (DESIGN "Judging a batch"): items are matched by
 * item_key; an item's outcome is its verdict, or, in a batch without checks, whether it succeeded.
 */

const side = z
  .object({
    id: z.string(),
    title: z.string(),
    model: z.string(),
    status: batchStatusSchema,
    /** Passed / judged over this batch's matched, finished items (null when none was judged). */
    pass_rate: z.number().nullable(),
  })
  .strict();

const passFail = z.object({ passed: z.number(), failed: z.number() }).strict();
const pairOf = <T extends z.ZodType>(value: T) => z.object({ a: value, b: value }).strict();
const tokens = z.object({ input: z.number(), output: z.number() }).strict();

export const compareSummarySchema = z
  .object({
    a: side,
    b: side,
    items: z.object({ matched: z.number(), only_a: z.number(), only_b: z.number() }).strict(),
    /** Matched pairs where either side has not finished: they count in no verdict column. */
    pending: z.number(),
    verdicts: z
      .object({
        both_passed: z.number(),
        both_failed: z.number(),
        /** a failed → b passed */
        improved: z.number(),
        /** a passed → b failed */
        regressed: z.number(),
        /** Both finished, but one has no outcome (cancelled). */
        unjudged: z.number(),
      })
      .strict(),
    /** Exact two-sided McNemar test on improved vs regressed. */
    p_value: z.number(),
    /** p_value in words. */
    p_value_words: z.string(),
    checks: z.array(
      z.object({ name: z.string(), a: passFail, b: passFail, improved: z.number(), regressed: z.number() }).strict(),
    ),
    cost_usd: pairOf(z.number()),
    tokens: pairOf(tokens),
    duration_ms_p50: pairOf(z.number().nullable()),
    /** What changed from a to b: each setting that differs, both values as text (null: none; schemas and checks as JSON). */
    differences: z.array(
      z
        .object({
          setting: z.enum(["prompt_template", "model", "subagent", "output_schema", "checks", "golden_set", "lane", "examples"]),
          a: z.string().nullable(),
          b: z.string().nullable(),
        })
        .strict(),
    ),
  })
  .strict();
export type CompareSummary = z.infer<typeof compareSummarySchema>;

export const COMPARE_CHANGES = ["improved", "regressed", "changed", "same", "all"] as const;
export const compareChangeSchema = z.enum(COMPARE_CHANGES);
export type CompareChange = z.infer<typeof compareChangeSchema>;

/** What one pair's change is: improved / regressed (verdict), changed (output or verdict differs), same, or pending. */
export const pairChangeSchema = z.enum(["improved", "regressed", "changed", "same", "pending"]);

const pairSide = z
  .object({
    item_id: z.string(),
    status: itemStatusSchema,
    /** The typed answer, else the text answer cut to the preview length. */
    output: z.unknown(),
    verdict: verdictSchema.nullable(),
    checks: z.array(checkResultSchema),
    cost_usd: z.number(),
    duration_ms: z.number().nullable(),
  })
  .strict();

export const comparePairSchema = z
  .object({
    item_key: z.string(),
    input: z.string(),
    expected: z.unknown().optional(),
    change: pairChangeSchema,
    a: pairSide,
    b: pairSide,
  })
  .strict();
export type ComparePair = z.infer<typeof comparePairSchema>;

export const comparePageSchema = z.object({ items: z.array(comparePairSchema), next_cursor: z.string().nullable() }).strict();
export type ComparePage = z.infer<typeof comparePageSchema>;
