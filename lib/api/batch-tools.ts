import { z } from "zod";
import { checkSchema, itemFieldValueSchema, MAX_CHECKS, MAX_ITEM_FIELDS } from "@/lib/api/batch-data";
import {
  GLOB_MAX_CHARS,
  ITEM_KEY_MAX_CHARS,
  PROMPT_TEMPLATE_MAX_CHARS,
  SUBAGENT_NAME_MAX_CHARS,
} from "@/lib/batch-rules";
import { batchLaneSchema, MAX_PILOT_ITEMS } from "./batches";
import { examplesSchema } from "./golden-sets";
import { variantRequestSchema } from "./variants";

/**
 * The input schemas of the batch tools (server/agent/tools/batch.ts), beside the wire types
 * (they import nothing but zod and the pure submission rules) so the simulator's chat grammar
 * (server/models, below the agent) can type its calls against them. batch_task's arguments are the JSON door's fields, their bounds
 * from lib/batch-rules.ts (MCP's submit_batch documents the same), and a variant's: the variant endpoint's.
 */

const itemObject = z
  .object({
    item_key: z.string().min(1).max(ITEM_KEY_MAX_CHARS).optional().describe("Stable key for this item (default item-1, item-2, ...)."),
    prompt: z.string().min(1).optional().describe("The complete, self-contained instructions for this item (an item with only a prompt)."),
    expected: z.unknown().optional().describe("What the checks compare the answer with (any JSON); never shown to the sub-agent."),
  })
  .catchall(itemFieldValueSchema)
  .describe("{item_key?, prompt}, or a record of fields {item_key?, <field>: string | number | boolean, ..., expected?} filling {{<field>}}.");

/** The JSON door's fields as a model reads them (batch_task, MCP's submit_batch). */
export const batchSubmissionInputSchema = z.object({
  subagent: z.string().min(1).max(SUBAGENT_NAME_MAX_CHARS).optional().describe("Which sub-agent runs every item (default general)."),
  prompt_template: z
    .string()
    .min(1)
    .max(PROMPT_TEMPLATE_MAX_CHARS)
    .optional()
    .describe(
      "Template with {{item}}; each string item is substituted into it to form that item's prompt. " +
        "For items that are records of fields: {{<field>}} is replaced by that field of each item. " +
        "With files: a template with {{file}}, replaced by each file's path.",
    ),
  items: z
    .union([z.array(z.string().min(1)).min(1), z.array(itemObject).min(1)])
    .optional()
    .describe(
      "The independent items: strings (with prompt_template), {item_key?, prompt} objects, or records of fields " +
        `(at most ${MAX_ITEM_FIELDS} fields, filling {{<field>}} in prompt_template; expected is for the checks).`,
    ),
  files: z
    .string()
    .min(1)
    .max(GLOB_MAX_CHARS)
    .optional()
    .describe(
      "Instead of items: a glob over this thread's workspace files (e.g. reports/*.md, **/*.csv). One item per " +
        "matching file, keyed by its path; each item's sub-agent gets the workspace tools to read its file.",
    ),
  golden_set: z
    .object({ id: z.string(), version: z.number().int().min(1).optional() })
    .strict()
    .optional()
    .describe(
      "Instead of items: a golden set's id (and version, default its newest). Its items run, and the check golden compares " +
        "each answer with the set's expected answer (batch_status reports its pass rate). With variant_of: run on this set.",
    ),
  max_live_items: z.number().int().positive().optional().describe("Items admitted to the live window at once."),
  max_running_items: z.number().int().positive().optional().describe("Items of this batch executing at once across all workers."),
  max_total_tokens: z
    .number()
    .int()
    .positive()
    .optional()
    .describe("Budget: the batch pauses once its items used this many tokens (in-flight items finish)."),
  max_cost_usd: z.number().positive().optional().describe("Budget in US dollars, priced from the model catalog."),
  output_schema: z
    .record(z.string(), z.unknown())
    .optional()
    .describe("A JSON Schema (at most 16 KB): each item's answer is then one JSON value valid against it (a dataset of fields)."),
  checks: z
    .array(checkSchema)
    .max(MAX_CHECKS)
    .optional()
    .describe(
      "Checks on every answer, each named: regex (pattern, optional JSON Pointer path into the answer), equals (the answer " +
        "at path equals the item's expected at expected_path), judge (a model grades 0..1 against rubric). on_fail: flag " +
        "(default) or retry.",
    ),
  pilot: z
    .number()
    .int()
    .min(1)
    .max(MAX_PILOT_ITEMS)
    .optional()
    .describe("Run only the first N items, then pause until the user looks and resumes the batch in the panel."),
  lane: batchLaneSchema
    .optional()
    .describe(
      "provider_batch: the items go through the model provider's batch API at its batch price, slower (an openai or " +
        "anthropic model, a sub-agent without tools); default live.",
    ),
  examples: examplesSchema
    .nullable()
    .optional()
    .describe(
      "{golden_set, version?, count: 1..20}: that many of a golden set's items (what people accepted or corrected) go " +
        "before every item's prompt as input -> answer examples (never the item itself). With variant_of: null drops the original's.",
    ),
});

/** batch_task: a new batch, or with variant_of a variant (the variant endpoint's settings). */
export const batchTaskInputSchema = batchSubmissionInputSchema.extend({
  variant_of: z
    .string()
    .optional()
    .describe(
      "A batch_id of this thread: run its items again (same item_keys, fields and expected values) with only what you " +
        "pass changed: prompt_template, model, subagent, output_schema, checks, pilot, lane, examples, max_running_items; every " +
        "other setting as that batch's. Pass no items or files. Then compare the two runs with compare_batches.",
    ),
  model: variantRequestSchema.shape.model.describe("With variant_of: a catalog model name every item runs on."),
  only: variantRequestSchema.shape.only.describe(
    "With variant_of: only the items that ended so in that batch, e.g. {verdict: \"failed\"} or {status: [\"failed\"]}.",
  ),
});
export type BatchTaskInput = z.infer<typeof batchTaskInputSchema>;

export const batchStatusInputSchema = z.object({
  batch_id: z.string().optional().describe("A batch id from a batch_task receipt; omit for this thread's recent batches."),
});

export const BATCH_RESULTS_MAX_LIMIT = 50;
export const BATCH_RESULTS_DEFAULT_LIMIT = 20;

export const batchResultsInputSchema = z.object({
  batch_id: z.string().describe("A batch of this thread."),
  status: z
    .enum(["succeeded", "failed", "cancelled", "pending", "queued", "leased", "running"])
    .optional()
    .describe("Only items of this status (e.g. failed)."),
  verdict: z
    .enum(["passed", "failed"])
    .optional()
    .describe("Only items whose checks all passed (passed) or at least one failed (failed)."),
  cursor: z.string().optional().describe("next_cursor of the previous page."),
  limit: z
    .number()
    .int()
    .min(1)
    .max(BATCH_RESULTS_MAX_LIMIT)
    .optional()
    .describe(`Items per page (default ${BATCH_RESULTS_DEFAULT_LIMIT}, at most ${BATCH_RESULTS_MAX_LIMIT}).`),
});

export const compareBatchesInputSchema = z.object({
  a: z.string().describe("The run to compare from, e.g. the original: a batch_id of this thread."),
  b: z.string().describe("The run to compare with, e.g. its variant: a batch_id of yours."),
});
