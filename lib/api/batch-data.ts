import { z } from "zod";

/**
 * Batches that produce data: the wire shapes of typed results (`output_schema`), checks and
 * verdicts, and object items. Shared by every door (JSON, NDJSON and CSV bodies, the dialog,
 * batch_task, sub-agent definitions), the projections and the panel. Structure only: whether a
 * schema compiles (Ajv) or a pattern parses (RE2) is checked by the server's one writer.
 */

/** An output schema is a JSON Schema object of at most this many bytes (serialized). */
export const OUTPUT_SCHEMA_MAX_BYTES = 16 * 1024;
export const MAX_CHECKS = 16;
export const CHECK_NAME_MAX_CHARS = 64;
export const CHECK_PATTERN_MAX_CHARS = 1_000;
export const CHECK_RUBRIC_MAX_CHARS = 4_000;
/** An object item carries at most this many fields (besides item_key and expected). */
export const MAX_ITEM_FIELDS = 64;
export const ITEM_FIELD_NAME_MAX_CHARS = 64;
/** The serialized `expected` of one item. */
export const EXPECTED_MAX_BYTES = 16 * 1024;
/** A judge passes at or above this score unless the check sets its own threshold. */
export const DEFAULT_JUDGE_THRESHOLD = 0.5;
/** Names the judge's structured output, so a provider (and the simulator) can tell a judge call. */
export const JUDGE_OUTPUT_NAME = "flotilla_judge_verdict";

const utf8Bytes = (value: unknown): number => new TextEncoder().encode(JSON.stringify(value)).length;

export const outputSchemaSchema = z
  .record(z.string(), z.unknown(), { error: "must be a JSON Schema object" })
  .refine((s) => utf8Bytes(s) <= OUTPUT_SCHEMA_MAX_BYTES, {
    error: `must be at most ${OUTPUT_SCHEMA_MAX_BYTES} bytes as JSON`,
  });
export type OutputSchema = z.infer<typeof outputSchemaSchema>;

const checkName = z
  .string()
  .min(1, "must not be empty")
  .max(CHECK_NAME_MAX_CHARS, `must be at most ${CHECK_NAME_MAX_CHARS} characters`)
  .regex(/^[A-Za-z0-9_.-]+$/, "may hold only letters, digits, _ . and -");
const onFail = z.enum(["flag", "retry"]).optional();
/** A JSON Pointer (RFC 6901) into the answer: "" is the whole answer, "/label" a property. */
const jsonPointer = z.string().max(500, "must be at most 500 characters").regex(/^(\/.*)?$/, 'must be a JSON Pointer ("" or starting with "/")');

export const regexCheckSchema = z
  .object({
    name: checkName,
    type: z.literal("regex"),
    pattern: z.string().min(1, "must not be empty").max(CHECK_PATTERN_MAX_CHARS, `must be at most ${CHECK_PATTERN_MAX_CHARS} characters`),
    flags: z.string().regex(/^[imsu]*$/, "may hold only the flags i, m, s and u").optional(),
    path: jsonPointer.optional(),
    on_fail: onFail,
  })
  .strict();

export const equalsCheckSchema = z
  .object({
    name: checkName,
    type: z.literal("equals"),
    path: jsonPointer,
    expected_path: jsonPointer.optional(),
    on_fail: onFail,
  })
  .strict();

export const judgeCheckSchema = z
  .object({
    name: checkName,
    type: z.literal("judge"),
    rubric: z.string().min(1, "must not be empty").max(CHECK_RUBRIC_MAX_CHARS, `must be at most ${CHECK_RUBRIC_MAX_CHARS} characters`),
    model: z.string().min(1, "must not be empty").optional(),
    threshold: z.number().min(0, "must be between 0 and 1").max(1, "must be between 0 and 1").optional(),
    on_fail: onFail,
  })
  .strict();

export const checkSchema = z.discriminatedUnion("type", [regexCheckSchema, equalsCheckSchema, judgeCheckSchema], {
  error: 'must be a check of type "regex", "equals" or "judge"',
});
/**
 * The check a run against a golden set gets (DESIGN "Reviews that teach"): the answer equals the
 * item's `expected` under the equals check's rules, for a typed answer every field of `expected`.
 * Added by the writer, never submitted (a submission's checks take the three types above).
 */
export const GOLDEN_CHECK_NAME = "golden";
export const goldenCheckSchema = z.object({ name: z.literal(GOLDEN_CHECK_NAME), type: z.literal("golden") }).strict();
export type GoldenCheck = z.infer<typeof goldenCheckSchema>;
/** A check a submission gives. */
export type Check = z.infer<typeof checkSchema>;
/** A check as a batch's spec holds it: a submitted one, or the golden set's. */
export type SpecCheck = Check | GoldenCheck;
/** The checks a spec holds (the golden one among them). */
export const specChecksSchema = z.array(z.discriminatedUnion("type", [regexCheckSchema, equalsCheckSchema, judgeCheckSchema, goldenCheckSchema]));

export const checksSchema = z
  .array(checkSchema)
  .max(MAX_CHECKS, `at most ${MAX_CHECKS} checks`)
  .superRefine((checks, ctx) => {
    const seen = new Set<string>();
    checks.forEach((c, i) => {
      if (seen.has(c.name)) ctx.addIssue({ code: "custom", path: [i, "name"], message: `duplicate check name "${c.name}"` });
      seen.add(c.name);
    });
  });

/** How one check judged one item's answer. A failed judge always carries a reason. */
export const checkResultSchema = z
  .object({
    name: z.string(),
    passed: z.boolean(),
    score: z.number().optional(),
    reason: z.string().optional(),
  })
  .strict();
export type CheckResult = z.infer<typeof checkResultSchema>;

/** passed: every check passed; failed: at least one did not; null: no checks, or not finished. */
export const verdictSchema = z.enum(["passed", "failed"]);
export type Verdict = z.infer<typeof verdictSchema>;

/** Per check of a batch: how many finished items passed and failed it. */
export const batchCheckCountSchema = z
  .object({
    name: z.string(),
    passed: z.number(),
    failed: z.number(),
    /** Judge checks and the golden set's: the share of items a person decided where the check's pass equals the person's accept (null before any). */
    agreement: z.number().nullable().optional(),
  })
  .strict();
export const batchVerdictsSchema = z.object({ passed: z.number(), failed: z.number() }).strict();

/** A field of an object item: what `{{field}}` fills with. */
export const itemFieldValueSchema = z.union([z.string(), z.number(), z.boolean()], {
  error: "must be a string, a number or a boolean",
});
export type ItemFieldValue = z.infer<typeof itemFieldValueSchema>;

/**
 * An object item: `{ item_key?, <field>: value, ..., expected? }` (`expected` never reaches the
 * prompt). An object whose only keys are `prompt` (and `item_key`) stays an explicit prompt; see
 * lib/batch-rules.ts parseItem.
 */
export interface ObjectItem {
  item_key?: string;
  fields: Record<string, ItemFieldValue>;
  expected?: unknown;
}
