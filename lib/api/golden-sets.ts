import { z } from "zod";

/** Golden sets (DESIGN "Reviews that teach"): what people decided, kept as the answers later runs are graded against. */

export const GOLDEN_SET_NAME_MAX_CHARS = 200;
/** Items one request may carry in its body (a batch's reviewed items have no such limit). */
export const GOLDEN_ITEMS_MAX = 10_000;
export const GOLDEN_PAGE_MAX = 200;

/** Which of a batch's reviewed items a set takes: accepted ones (the model's answer), corrected ones (the person's). */
export const GOLDEN_INCLUDE = ["accepted", "corrected"] as const;
export type GoldenInclude = (typeof GOLDEN_INCLUDE)[number];

const fromBatchSchema = z
  .object({
    batch_id: z.string({ error: "must be a batch id" }),
    include: z
      .array(z.enum(GOLDEN_INCLUDE, { error: 'must be "accepted" or "corrected"' }))
      .min(1, 'must name at least one of "accepted", "corrected"')
      .optional(),
  })
  .strict();

/** One item given in the body: a string input or an object of fields, and the right answer. */
export const goldenItemInputSchema = z
  .object({
    item_key: z.string({ error: "must be a string" }).optional(),
    input: z.string({ error: "must be a string" }).optional(),
    fields: z.record(z.string(), z.unknown(), { error: "must be an object of fields" }).optional(),
    /** Required: checked with the item (so the 400 names it as the other item rules do). */
    expected: z.unknown().optional(),
  })
  .strict();
export type GoldenItemInput = z.infer<typeof goldenItemInputSchema>;

const itemsSchema = z.array(goldenItemInputSchema, { error: "must be an array of items" }).min(1, "must hold at least one item").max(GOLDEN_ITEMS_MAX, `at most ${GOLDEN_ITEMS_MAX} items per request`);

/** What an add (and the first version) takes its answers from: a reviewed batch, or items. */
const sourceShape = { from_batch: fromBatchSchema.optional(), items: itemsSchema.optional() };
const oneSource = (v: { from_batch?: unknown; items?: unknown }) => (v.from_batch === undefined) !== (v.items === undefined);
const ONE_SOURCE = { message: "give exactly one of from_batch and items", path: ["from_batch"] };

export const createGoldenSetSchema = z
  .object({
    name: z
      .string({ error: (iss) => (iss.input === undefined ? "is required" : "must be a string") })
      .trim().min(1, "must not be empty").max(GOLDEN_SET_NAME_MAX_CHARS, `must be at most ${GOLDEN_SET_NAME_MAX_CHARS} characters`),
    ...sourceShape,
  })
  .strict()
  .refine(oneSource, ONE_SOURCE);
export type CreateGoldenSet = z.infer<typeof createGoldenSetSchema>;

export const addGoldenSetSchema = z.object(sourceShape).strict().refine(oneSource, ONE_SOURCE);
export type GoldenSource = z.infer<typeof addGoldenSetSchema>;

export const goldenVersionSourceSchema = z.union([
  z.object({ from: z.literal("batch"), batch_id: z.string() }).strict(),
  z.object({ from: z.literal("items") }).strict(),
]);

export const goldenSetSummarySchema = z.object({ id: z.string(), name: z.string(), version: z.number(), items: z.number(), updated_at: z.string() }).strict();
export type GoldenSetSummary = z.infer<typeof goldenSetSummarySchema>;
export const goldenSetListSchema = z.object({ golden_sets: z.array(goldenSetSummarySchema) }).strict();

export const goldenSetCreatedSchema = z.object({ id: z.string(), name: z.string(), version: z.number(), items: z.number() }).strict();
export type GoldenSetCreated = z.infer<typeof goldenSetCreatedSchema>;

/** An add: the new version, its item count, new item_keys and item_keys whose answer it replaced. */
export const goldenSetAddedSchema = z.object({ version: z.number(), items: z.number(), added: z.number(), replaced: z.number() }).strict();
export type GoldenSetAdded = z.infer<typeof goldenSetAddedSchema>;

export const goldenSetDetailSchema = z
  .object({
    id: z.string(),
    name: z.string(),
    version: z.number(),
    versions: z.array(z.object({ version: z.number(), items: z.number(), source: goldenVersionSourceSchema, created_at: z.string() }).strict()),
  })
  .strict();
export type GoldenSetDetail = z.infer<typeof goldenSetDetailSchema>;

export const goldenItemSchema = z
  .object({
    item_key: z.string(),
    input: z.string().optional(),
    fields: z.record(z.string(), z.unknown()).optional(),
    expected: z.unknown(),
    source: z.object({ batch_id: z.string(), item_id: z.string(), decision: z.enum(GOLDEN_INCLUDE) }).strict().optional(),
  })
  .strict();
export type GoldenItem = z.infer<typeof goldenItemSchema>;

export const goldenItemPageSchema = z.object({ items: z.array(goldenItemSchema), next_cursor: z.string().nullable() }).strict();
export type GoldenItemPage = z.infer<typeof goldenItemPageSchema>;

/** A run against a golden set (a submission, a variant, batch_task): the set and its version (the newest when omitted). */
export const goldenSetRefSchema = z
  .object({
    id: z.string({ error: "must be a golden set id" }),
    version: z.number({ error: "must be a version number" }).int("must be a whole number").min(1, "must be at least 1").optional(),
  })
  .strict();
export type GoldenSetRef = z.infer<typeof goldenSetRefSchema>;
/** What a batch records of the set it ran on. */
export const goldenSetRunSchema = z.object({ id: z.string(), version: z.number() }).strict();
export type GoldenSetRun = z.infer<typeof goldenSetRunSchema>;

/** The most golden-set items a submission may put before each item's prompt as examples. */
export const MAX_EXAMPLES = 20;

/**
 * A submission's `examples` (DESIGN "Reviews that teach"): `count` of a golden set's items (its
 * newest version without `version`), the first by md5 of item_key, go before each item's prompt as
 * input -> answer pairs, in the shared prefix the provider caches; an item never sees itself.
 */
export const examplesSchema = z
  .object({
    golden_set: z.string({ error: (iss) => (iss.input === undefined ? "is required" : "must be a golden set id") }).min(1, "must be a golden set id"),
    version: z.number({ error: "must be a version number" }).int("must be a whole number").positive("must be a positive whole number").optional(),
    count: z
      .number({ error: (iss) => (iss.input === undefined ? "is required" : "must be a whole number") })
      .int("must be a whole number")
      .min(1, `must be between 1 and ${MAX_EXAMPLES}`)
      .max(MAX_EXAMPLES, `must be between 1 and ${MAX_EXAMPLES}`),
  })
  .strict();
export type ExamplesRequest = z.infer<typeof examplesSchema>;
