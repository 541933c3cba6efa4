import { z } from "zod";
import {
  isProblem,
  jsonValueProblem,
  keyProblem,
  MAX_COST_USD,
  parseItem,
  type SubmitItem,
  PROMPT_TEMPLATE_MAX_CHARS,
  SUBAGENT_NAME_MAX_CHARS,
  SUBMISSION_KEY_MAX_CHARS,
} from "@/lib/batch-rules";
import {
  batchCheckCountSchema,
  batchVerdictsSchema,
  CHECK_NAME_MAX_CHARS,
  checkResultSchema,
  checksSchema,
  MAX_CHECKS,
  OUTPUT_SCHEMA_MAX_BYTES,
  outputSchemaSchema,
  verdictSchema,
} from "./batch-data";
import { examplesSchema, goldenSetRunSchema } from "./golden-sets";
import { batchReviewsSchema, itemReviewSchema, reviewStateSchema } from "./reviews";
import { toolCallRecordSchema } from "./runs";

/**
 * Public projections of durable batches (snake_case JSON). These are the only shapes the
 * batch API returns; they never carry execution specs, submission keys, authorization,
 * prompts, lease internals or full results.
 */
export const batchStatusSchema = z.enum(["queued", "running", "paused", "completed", "failed", "cancelled"]);
export const itemStatusSchema = z.enum([
  "pending",
  "queued",
  "leased",
  "running",
  "awaiting_approval",
  "succeeded",
  "failed",
  "cancelled",
]);
export type BatchStatus = z.infer<typeof batchStatusSchema>;
export type ItemStatus = z.infer<typeof itemStatusSchema>;

/** Tokens spent; cache reads and writes are counted inside input_tokens (each priced at its own price). */
export const usageSchema = z
  .object({
    input_tokens: z.number(),
    output_tokens: z.number(),
    cached_input_tokens: z.number(),
    cache_write_tokens: z.number(),
  })
  .strict();

export const batchCountsSchema = z
  .object({
    pending: z.number(),
    queued: z.number(),
    leased: z.number(),
    running: z.number(),
    /** Parked until a person approves or denies a tool call (no slot, no lease). */
    awaiting_approval: z.number(),
    succeeded: z.number(),
    failed: z.number(),
    cancelled: z.number(),
  })
  .strict();

/** Budget of one batch: limits (null = none) and what its items used so far. */
export const batchBudgetSchema = z
  .object({
    max_total_tokens: z.number().nullable(),
    max_cost_usd: z.number().nullable(),
    used_tokens: z.number(),
    used_cost_usd: z.number(),
  })
  .strict();

/** Why a batch that is not finished is not moving (null while items move). */
export const waitingReasonSchema = z.enum(["paused", "budget", "no_worker", "rate_limited", "capacity"]);
export type WaitingReason = z.infer<typeof waitingReasonSchema>;

export const pauseReasonSchema = z.enum(["user", "budget", "quota", "pilot"]);

/** The most items a pilot may run before the batch pauses for the person to look. */
export const MAX_PILOT_ITEMS = 1_000;

export const batchLaneSchema = z.enum(["live", "provider_batch"]);

/** Whether a model provider has a batch API the `provider_batch` lane sends to (openai, anthropic). */
export const providerBatchLane = (provider: string | undefined): boolean => provider === "openai" || provider === "anthropic";
export type BatchLane = z.infer<typeof batchLaneSchema>;

/** Throughput over the recent window and the ETA it implies; null when too few items finished to say. */
export const batchEtaSchema = z
  .object({
    window_seconds: z.number(),
    finished_in_window: z.number(),
    items_per_minute: z.number(),
    remaining: z.number(),
    eta_seconds: z.number(),
  })
  .strict();
export type BatchEta = z.infer<typeof batchEtaSchema>;

/** One provider batch of a `provider_batch` batch: the provider's state and its request counts. */
export const providerBatchViewSchema = z
  .object({
    id: z.string(),
    provider: z.enum(["openai", "anthropic"]),
    /** submitting | in_progress | canceling | ended | settled | abandoned */
    state: z.enum(["submitting", "in_progress", "canceling", "ended", "settled", "abandoned"]),
    /** The provider's own status word (OpenAI's `status`, Anthropic's `processing_status`), as last polled. */
    provider_status: z.string().nullable(),
    counts: z
      .object({ requests: z.number(), succeeded: z.number(), errored: z.number(), expired: z.number(), cancelled: z.number() })
      .strict(),
    created_at: z.string(),
    ended_at: z.string().nullable(),
  })
  .strict();
export type ProviderBatchView = z.infer<typeof providerBatchViewSchema>;

export const batchProjectionSchema = z
  .object({
    id: z.string(),
    thread_id: z.string(),
    status: batchStatusSchema,
    subagent: z.string(),
    total: z.number(),
    counts: batchCountsSchema,
    /** queued + leased + running */
    live: z.number(),
    /** succeeded + failed + cancelled */
    terminal: z.number(),
    /** 0..100, clamped */
    progress: z.number(),
    max_live_items: z.number(),
    max_running_items: z.number(),
    max_attempts: z.number(),
    usage: usageSchema,
    /** The catalog model the items run on. */
    model: z.string(),
    /**
     * US dollars: the items' cost, each model's tokens (the batch's, a judge's) at that model's
     * catalog prices taken when the batch was submitted (0 for the simulator or an unpriced model).
     */
    cost_usd: z.number(),
    budget: batchBudgetSchema,
    /** Set while paused: by the owner ("user"), at the budget, at the daily token quota, or after its pilot items ("pilot"). */
    pause_reason: pauseReasonSchema.nullable(),
    /** The pilot's size while it holds back the rest (null: none, or resumed past it). */
    pilot: z.number().nullable(),
    waiting_reason: waitingReasonSchema.nullable(),
    /** rate_limited: the instant the shared limit lifts. */
    waiting_until: z.string().nullable(),
    /** no_worker: the last heartbeat of any worker (null when none ever ran). */
    waiting_since: z.string().nullable(),
    eta: batchEtaSchema.nullable(),
    /**
     * While the batch is active: every live worker's slots in all (subagent_runtime.max_running
     * each), shared by every batch. With max_running_items, what limits how many items run at once.
     */
    worker_slots: z.number().nullable(),
    /** Per check of the spec, in its order: finished items that passed and failed it (zeros until one finished). */
    checks: z.array(batchCheckCountSchema),
    /** Finished items with checks by verdict. */
    verdicts: batchVerdictsSchema,
    /** A run against a golden set: the set and version its items came from (their answers graded by the check "golden"); null otherwise. */
    golden_set: goldenSetRunSchema.nullable(),
    /** The object items' field names (the results table's input columns); [] for string items. */
    input_fields: z.array(z.string()),
    /** The output schema's top-level property names (the results table's output columns); [] without a schema. */
    output_fields: z.array(z.string()),
    created_at: z.string(),
    updated_at: z.string(),
    started_at: z.string().nullable(),
    finished_at: z.string().nullable(),
    /** When a retry last reopened the finished batch (null: never): its elapsed time and throughput count from here. */
    reopened_at: z.string().nullable(),
    /** The batch this one re-runs with changed settings (POST .../variant), else null. */
    variant_of: z.string().nullable(),
    /** That batch's title (null: not a variant, or the original is gone). */
    variant_of_title: z.string().nullable(),
    /** What the batch is called on screen: its template's first line, else its sub-agent (lib/batch-title.ts). */
    title: z.string(),
    /** Items in the review queue and decided (DESIGN "Judging a batch"). */
    reviews: batchReviewsSchema,
    /** `live`: a model call an item; `provider_batch`: through the provider's batch API. */
    lane: batchLaneSchema,
    /** The provider batches the items went out in, oldest first ([] on the live lane). */
    provider_batches: z.array(providerBatchViewSchema),
  })
  .strict();
export type BatchProjection = z.infer<typeof batchProjectionSchema>;

export const itemProjectionSchema = z
  .object({
    id: z.string(),
    item_key: z.string(),
    /** The string that filled {{item}} (or the file path, or the explicit prompt), cut to ITEM_INPUT_MAX_CHARS. */
    input: z.string(),
    position: z.number(),
    status: itemStatusSchema,
    attempts: z.number(),
    preview: z.string().nullable(),
    error: z.string().nullable(),
    usage: usageSchema,
    /** US dollars: the item's tokens, each model's (the batch's, its judges') at that model's price snapshot. */
    cost_usd: z.number(),
    /** Typed results: the parsed answer; null without one, or when its compact JSON is longer than result_preview_max_chars. */
    output: z.unknown(),
    /** An object item's `expected` (what the checks compare with); null without one, or when its compact JSON is longer than result_preview_max_chars. */
    expected: z.unknown(),
    /** A person's corrected answer (the final answer over `output`); null without one, or when longer than result_preview_max_chars. */
    reviewed_output: z.unknown(),
    /** How each check judged the answer ([] when none ran). */
    checks: z.array(checkResultSchema),
    /** passed | failed once finished with checks; null otherwise. */
    verdict: verdictSchema.nullable(),
    /** A person's review: null until the item is queued for one. */
    review: itemReviewSchema.nullable(),
    /** Tool calls of the item's latest run (the list is on the item detail). */
    tool_calls: z.number(),
    started_at: z.string().nullable(),
    finished_at: z.string().nullable(),
  })
  .strict();
export type ItemProjection = z.infer<typeof itemProjectionSchema>;

/** GET .../items/{item_id}: the row plus the tool calls of its latest run (bounded previews) and the whole input to edit. */
export const itemDetailSchema = itemProjectionSchema
  .extend({
    tool_call_list: z.array(toolCallRecordSchema),
    /**
     * The item whole, as `POST .../items/{item_id}/retry { input }` takes it: an object item's
     * fields with its `expected`, `{ prompt }` for an explicit prompt, else the input text.
     */
    editable_input: z.unknown(),
  })
  .strict();
export type ItemDetail = z.infer<typeof itemDetailSchema>;

export const itemPageSchema = z.object({ items: z.array(itemProjectionSchema), next_cursor: z.string().nullable() }).strict();
export type ItemPage = z.infer<typeof itemPageSchema>;

export const batchListSchema = z.object({ batches: z.array(batchProjectionSchema) }).strict();

/** One line of results.jsonl, in position order. */
export const resultLineSchema = z
  .object({
    item_key: z.string(),
    /** The item's whole input: an object item's fields as that object, else the text. */
    input: z.union([z.string(), z.record(z.string(), z.unknown())]),
    position: z.number(),
    status: itemStatusSchema,
    attempts: z.number(),
    /** The answer: a typed one as its value (the same as `output`), else the text; null without one. */
    result: z.unknown(),
    error: z.string().nullable(),
    /** An object item's `expected` (what the checks compare with), null when it has none. */
    expected: z.unknown(),
    /** Typed results: the parsed answer (whole), null without one. */
    output: z.unknown(),
    checks: z.array(checkResultSchema),
    verdict: verdictSchema.nullable(),
    /** A person's review: null when the item was never queued for one. */
    review_state: reviewStateSchema.nullable(),
    review_note: z.string().nullable(),
    /** The person's corrected answer, kept beside the model's `output` (null: none). */
    reviewed_output: z.unknown(),
    usage: usageSchema,
  })
  .strict();

/** Item statuses a batch retry can select (finished ones). */
export const FINISHED_ITEM_STATUSES = ["succeeded", "failed", "cancelled"] as const;

/**
 * POST .../subagent-batches/{id}/retry: every finished item matching all the given filters
 * (at least one) re-queued with fresh attempts. `check` names one of the batch's checks: items
 * that failed it.
 */
export const batchRetrySchema = z
  .object({
    status: z
      .array(z.enum(FINISHED_ITEM_STATUSES, { error: `must hold only ${FINISHED_ITEM_STATUSES.join(", ")}` }))
      .min(1, "must name at least one status")
      .refine((s) => new Set(s).size === s.length, { error: "must not repeat a status" })
      .optional(),
    verdict: z.literal("failed", { error: 'must be "failed"' }).optional(),
    check: z.string().min(1, "must not be empty").max(CHECK_NAME_MAX_CHARS, `must be at most ${CHECK_NAME_MAX_CHARS} characters`).optional(),
  })
  .strict()
  .refine((v) => v.status !== undefined || v.verdict !== undefined || v.check !== undefined, {
    error: "status, verdict or check: give at least one (a retry of every finished item must be asked for by status)",
  });
export type BatchRetry = z.infer<typeof batchRetrySchema>;
export const batchRetryResponseSchema = z.object({ retried: z.number() }).strict();

/**
 * POST .../items/{item_id}/retry: optionally a corrected `input`, checked like a submission item
 * of the batch; it replaces the item (prompt rebuilt from the batch's template, an object item's
 * `expected` taken from it, absent = none).
 */
export const itemRetrySchema = z.object({ input: z.unknown().optional() }).strict();

/**
 * One submitted item (lib/batch-rules.ts parseItem): a string for {{item}}, `{ item_key?, prompt }`,
 * or an object of fields `{ item_key?, <field>: string | number | boolean, ..., expected? }`.
 */
export const submitItemSchema = z.custom<SubmitItem>().superRefine((value, ctx) => {
  const item = parseItem(value, 0);
  const problem = isProblem(item) ? item : typeof item === "string" || item.item_key === undefined ? null : keyProblem(item.item_key, 0);
  if (problem) ctx.addIssue({ code: "custom", path: problem.field ? [problem.field] : [], message: problem.message });
});

/**
 * A submission's output schema: a JSON Schema object of at most 16 KB. Its depth is bounded
 * before it is measured: serializing a value nested thousands deep overflows the stack.
 */
export const submitOutputSchemaSchema = z
  .unknown()
  .superRefine((value, ctx) => {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return; // outputSchemaSchema says why
    const issue = jsonValueProblem(value, OUTPUT_SCHEMA_MAX_BYTES);
    if (issue) ctx.addIssue({ code: "custom", message: issue });
  })
  .pipe(outputSchemaSchema);

/** Checks run on each answer (lib/api/batch-data.ts), their text storable (no NUL). */
export const submitChecksSchema = checksSchema.superRefine((checks, ctx) => {
  const issue = jsonValueProblem(checks, MAX_CHECKS * 8 * 1024);
  if (issue) ctx.addIssue({ code: "custom", message: issue });
});

/** Budget fields every submission may carry (items or files, any door). */
export const submissionBudgetShape = {
  /** Budget: the batch pauses (pause_reason "budget") once its items used this many tokens. */
  max_total_tokens: z.number().int("must be a whole number").positive("must be a positive number").max(Number.MAX_SAFE_INTEGER).optional(),
  /** Budget in US dollars, priced from the model catalog. */
  max_cost_usd: z.number().positive("must be a positive number").max(MAX_COST_USD).optional(),
};

/** The fields every submission has besides its items (or files). */
export const reviewPolicySchema = z
  .object({
    when: z.enum(["failed", "all", "sample"], { error: 'must be "failed", "all" or "sample"' }),
    /** `sample`: the share of items reviewed (a deterministic sample by item_key). */
    rate: z.number().min(0, "must be between 0 and 1").max(1, "must be between 0 and 1").optional(),
  })
  .strict()
  .superRefine((policy, ctx) => {
    if (policy.when === "sample" && policy.rate === undefined)
      ctx.addIssue({ code: "custom", path: ["rate"], message: 'is required when "when" is "sample"' });
    if (policy.when !== "sample" && policy.rate !== undefined)
      ctx.addIssue({ code: "custom", path: ["rate"], message: 'is only for "when": "sample"' });
  });
export type ReviewPolicy = z.infer<typeof reviewPolicySchema>;

export const submissionFieldsShape = {
  submission_key: z
    .string()
    .min(1, "must not be empty")
    .max(SUBMISSION_KEY_MAX_CHARS, `must be at most ${SUBMISSION_KEY_MAX_CHARS} characters`)
    // A key must be exact: NUL or a lone surrogate (which storage would change) is refused, not replaced.
    .superRefine(refuseUnstorable),
  subagent: z.string().min(1, "must not be empty").max(SUBAGENT_NAME_MAX_CHARS, `must be at most ${SUBAGENT_NAME_MAX_CHARS} characters`).optional(),
  /** A model catalog name every item runs on; default the sub-agent's own model, else the deployment's. */
  model: z.string().min(1, "must not be empty").max(SUBAGENT_NAME_MAX_CHARS, `must be at most ${SUBAGENT_NAME_MAX_CHARS} characters`).optional(),
  max_live_items: z.number().int("must be a whole number").positive("must be a positive whole number").optional(),
  max_running_items: z.number().int("must be a whole number").positive("must be a positive whole number").optional(),
  ...submissionBudgetShape,
  /** Run only the first N items (by position), then pause (pause_reason "pilot") until the person resumes. */
  pilot: z
    .number()
    .int("must be a whole number")
    .min(1, "must be at least 1")
    .max(MAX_PILOT_ITEMS, `must be at most ${MAX_PILOT_ITEMS}`)
    .optional(),
  /** Typed results: each item's answer is one JSON value valid against this schema. */
  output_schema: submitOutputSchemaSchema.optional(),
  checks: submitChecksSchema.optional(),
  /** Which items join the review queue once finished (DESIGN "Judging a batch"). */
  review: reviewPolicySchema.optional(),
  /**
   * `provider_batch`: the items go through the model provider's batch API at its batch price
   * (an openai or anthropic model, a sub-agent without tool groups); default `live`.
   */
  lane: batchLaneSchema.optional(),
  /** A golden set's items put before each item's prompt as input -> answer pairs (lib/api/golden-sets.ts). */
  examples: examplesSchema.optional(),
};

/** NUL and lone surrogates: jsonb refuses them, so they are a 400 here, not a 500 at the insert. */
function refuseUnstorable(s: string, ctx: z.RefinementCtx): void {
  const problem = jsonValueProblem(s, Number.POSITIVE_INFINITY);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
}

export const promptTemplateSchema = z
  .string()
  .min(1, "must not be empty")
  .max(PROMPT_TEMPLATE_MAX_CHARS, `must be at most ${PROMPT_TEMPLATE_MAX_CHARS} characters`)
  .superRefine(refuseUnstorable);

/**
 * Submission body (JSON). For application/x-ndjson and text/csv the items are the body's lines
 * or records and the rest are query parameters (output_schema and checks as JSON text).
 */
export const submitBatchSchema = z
  .object({
    ...submissionFieldsShape,
    items: z.array(submitItemSchema).min(1, "must contain at least one item"),
    /** {{item}} for string items, {{<field>}} for object items. */
    prompt_template: promptTemplateSchema.optional(),
  })
  .strict();
export type SubmitBatchInput = z.infer<typeof submitBatchSchema>;

/** Pure: clamps any persisted progress (NaN, Infinity, negative, >100) into 0..100. */
export function clampProgress(terminal: number, total: number): number {
  if (!Number.isFinite(terminal) || !Number.isFinite(total) || total <= 0) return 0;
  const pct = (terminal / total) * 100;
  if (!Number.isFinite(pct)) return 0;
  return Math.min(100, Math.max(0, Math.round(pct * 10) / 10));
}

/** /api/features */
export const featuresSchema = z
  .object({
    sql_repository: z.object({ available: z.boolean() }).strict(),
    /** `slots`: the live workers' slots in all (subagent_runtime.max_running each): at most this many items run at once, across batches. */
    worker_runtime: z.object({ alive: z.boolean(), workers: z.number(), slots: z.number(), last_heartbeat_at: z.string().nullable() }).strict(),
    batches: z
      .object({
        enabled: z.boolean(),
        max_items_per_batch: z.number(),
        default_max_live_items: z.number(),
        max_live_items_per_batch: z.number(),
        default_max_running_items: z.number(),
        max_running_items_per_batch: z.number(),
        max_attempts: z.number(),
        max_total_prompt_chars: z.number(),
      })
      .strict(),
    model: z.object({ name: z.string(), simulator: z.boolean() }).strict(),
    /**
     * Each sub-agent with the catalog model its batches run on (its own, else the default), that
     * model's provider ("simulator", "openai-compatible", "openai", "anthropic", "google"), and
     * whether its batches may take `lane: "provider_batch"` (an openai or anthropic model, no tools).
     */
    subagents: z.array(
      z
        .object({
          name: z.string(),
          description: z.string(),
          model: z.string(),
          provider: z.string(),
          provider_batch: z.boolean(),
          /** Its tool groups: the providers' batch lane takes only a sub-agent without any. */
          tool_groups: z.array(z.string()),
        })
        .strict(),
    ),
    /** The model catalog a new batch may name (`model`), each with its provider. */
    models: z.array(z.object({ name: z.string(), provider: z.string() }).strict()),
  })
  .strict();
export type Features = z.infer<typeof featuresSchema>;

/** POST .../budget: raise (or remove, with null) either limit; at least one field. */
export const budgetUpdateSchema = z
  .object({
    max_total_tokens: z
      .number({ error: "must be a number or null" })
      .int("must be a whole number")
      .positive("must be a positive number")
      .max(Number.MAX_SAFE_INTEGER)
      .nullable()
      .optional(),
    max_cost_usd: z
      .number({ error: "must be a number or null" })
      .positive("must be a positive number")
      .max(MAX_COST_USD)
      .nullable()
      .optional(),
  })
  .strict()
  .refine((v) => v.max_total_tokens !== undefined || v.max_cost_usd !== undefined, {
    error: "max_total_tokens or max_cost_usd: give at least one",
  });
export type BudgetUpdate = z.infer<typeof budgetUpdateSchema>;

/**
 * GET/PUT /api/webhook. The secret appears only in the PUT answer. `legacy_secret`: the secret
 * predates Standard Webhooks signatures (deliveries also carry the old X-Flotilla-Signature
 * header until a new secret is taken).
 */
export const webhookSchema = z
  .object({ url: z.string(), legacy_secret: z.boolean(), created_at: z.string(), updated_at: z.string() })
  .strict();
export const webhookWithSecretSchema = webhookSchema.extend({ secret: z.string() }).strict();
export type Webhook = z.infer<typeof webhookSchema>;
export type WebhookWithSecret = z.infer<typeof webhookWithSecretSchema>;

export const WEBHOOK_EVENT_TYPES = ["batch.completed", "batch.failed", "batch.cancelled", "batch.paused"] as const;
/** The body of a webhook delivery (signed per Standard Webhooks; `timestamp` is when the event happened). */
export const webhookEventSchema = z
  .object({
    type: z.enum(WEBHOOK_EVENT_TYPES),
    timestamp: z.string(),
    data: z
      .object({
        id: z.string(),
        thread_id: z.string(),
        status: z.string(),
        counts: z.object({ total: z.number(), succeeded: z.number(), failed: z.number(), cancelled: z.number() }).strict(),
        usage: usageSchema,
        cost_usd: z.number(),
      })
      .strict(),
  })
  .strict();
export type WebhookEvent = z.infer<typeof webhookEventSchema>;

/** POST .../items/{item_id}/retry answers the re-queued item and its (possibly reopened) batch. */
export const itemRetryResponseSchema = z.object({ item: itemProjectionSchema, batch: batchProjectionSchema }).strict();
export type ItemRetryResponse = z.infer<typeof itemRetryResponseSchema>;

/**
 * GET /api/batch-notifications: settled batches not seen yet, threads whose lead wake-up (a
 * settled batch's or settled background children's) is pending, and the wake-up replies stored
 * in the last minute.
 */
export const batchNotificationsSchema = z
  .object({
    pending_wakeups: z.array(z.string()),
    recent_replies: z.array(z.object({ thread_id: z.string(), message_id: z.string() }).strict()),
    unseen: z.array(
      z.object({ thread_id: z.string(), batch_id: z.string(), status: z.string(), finished_at: z.string().nullable() }).strict(),
    ),
  })
  .strict();
export type BatchNotifications = z.infer<typeof batchNotificationsSchema>;

/** POST .../subagent-batches/seen: how many settlements it cleared. */
export const settlementsSeenSchema = z.object({ cleared: z.number() }).strict();

/**
 * POST /api/threads/{id}/subagent-batches/estimate: what a submission would cost, before anything
 * is written. Tokens counted with the model's own tokenizer for OpenAI models ("tiktoken"), else
 * at ~4 characters a token ("approx"); output at `output_per_item`: a typical answer of the output
 * schema's shape (`from: "output_schema"`, capped by max_output_tokens), else the definition's
 * max_output_tokens, else 500 an item (`"default"`). `cached_input_tokens` (inside `input_tokens`): the shared prefix every item after the
 * first reads from the provider's cache (a submission's `examples` open it, so they count in it). `provider_batch`: the same on the provider's batch lane
 * (present for openai and anthropic entries). Judge checks add one call an item each, on the
 * judge's model at its price, live on either lane: counted in the totals, and `judges` says how
 * much of them they are (present only when the batch has judge checks).
 */
export const batchEstimateSchema = z
  .object({
    items: z.number(),
    input_tokens: z.number(),
    cached_input_tokens: z.number(),
    output_tokens: z.number(),
    tokens_method: z.enum(["tiktoken", "approx"]),
    /** The sub-agent and the catalog model the items would run on (absent on cards stored before they were shown). */
    subagent: z.string().optional(),
    model: z.string().optional(),
    /** What the output figure assumes an item writes (absent on cards stored before it was shown). */
    output_per_item: z.object({ tokens: z.number(), from: z.enum(["output_schema", "max_output_tokens", "default"]) }).strict().optional(),
    cost_usd: z.object({ live: z.number(), provider_batch: z.number().optional() }).strict(),
    judges: z.object({ calls: z.number(), input_tokens: z.number(), output_tokens: z.number(), cost_usd: z.number() }).strict().optional(),
  })
  .strict();
export type BatchEstimate = z.infer<typeof batchEstimateSchema>;
