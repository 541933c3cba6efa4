import { z } from "zod";
import { type OutputSchema, outputSchemaSchema, type SpecCheck, specChecksSchema } from "@/lib/api/batch-data";
import { goldenSetRunSchema } from "@/lib/api/golden-sets";

/**
 * The execution spec stored with a batch: a snapshot of everything that defines the delegated
 * boundary at submission time (sub-agent definition, model, tool groups, caller identity and
 * authorization). A worker on any machine, after any restart, rebuilds exactly this boundary
 * from the row instead of from whatever its own configuration says today. Never projected.
 */

export const EXECUTION_SPEC_VERSION = 1;

/**
 * What runs an item: the sub-agent executor, or the compatible batch APIs' request executor
 * (server/compat/execute.ts: the item's stored request sent to the model it names).
 */
export const EXECUTION_KINDS = ["subagent", "compat_openai", "compat_anthropic"] as const;
export type ExecutionKind = (typeof EXECUTION_KINDS)[number];

/** A model's prices per million tokens; cache prices absent in older specs (then the input price). */
const modelPriceSchema = z.object({
  input: z.number().nonnegative(),
  output: z.number().nonnegative(),
  cached_input: z.number().nonnegative().optional(),
  cache_write: z.number().nonnegative().optional(),
  /** The share of the price a provider batch costs (absent: the model has no batch lane). */
  batch_discount: z.number().min(0).max(1).optional(),
});
export type ModelPrice = z.infer<typeof modelPriceSchema>;

const examplesSnapshotSchema = z.object({
  golden_set: z.string(),
  /** The set's name at submission (what a comparison shows). */
  name: z.string(),
  version: z.number().int().positive(),
  count: z.number().int().positive(),
  items: z.array(
    z.object({
      item_key: z.string(),
      input: z.string().nullable(),
      fields: z.record(z.string(), z.unknown()).nullable(),
      expected: z.unknown(),
    }),
  ),
});

const specSchema = z.object({
  version: z.literal(EXECUTION_SPEC_VERSION),
  kind: z.enum(EXECUTION_KINDS).default("subagent"),
  subagent: z.object({
    name: z.string().regex(/^[a-z][a-z0-9_-]{0,39}$/),
    description: z.string(),
    system_prompt: z.string(),
    tool_groups: z.array(z.string()),
    model: z.string().nullable(),
    max_turns: z.number().int().positive(),
    timeout_seconds: z.number().positive(),
  }),
  /** The catalog name the items run on: the definition's model, else the caller's. */
  model: z.object({ name: z.string() }),
  /** Group names, rebuilt by the worker; delegation tools are never a group and never granted. */
  tool_groups: z.array(z.string()),
  delegation: z.object({ task: z.literal(false), agent_swarm: z.literal(false), batch_task: z.literal(false) }),
  caller: z.object({
    user_id: z.string(),
    thread_id: z.string(),
    role: z.literal("owner"),
    origin: z.enum(["api", "tool"]),
    run_id: z.string().nullable(),
    tool_call_id: z.string().nullable(),
  }),
  authorization: z.object({
    /** The sub-agents this caller could choose from at submission (the allowlist checked). */
    allowed_subagents: z.array(z.string()),
  }),
  /** Typed results: each item's answer is one JSON value valid against this (the submission's, else the definition's). */
  output_schema: outputSchemaSchema.nullable().default(null),
  /** Checks run on each finished answer (lib/api/batch-data.ts). */
  checks: specChecksSchema.default([]),
  /** A run against a golden set: the set and the version its items came from (each item's `expected` is the set's). */
  golden_set: goldenSetRunSchema.nullable().default(null),
  /** Object items' field names in first-seen order: the results table's and CSV's input columns. */
  input_fields: z.array(z.string()).default([]),
  /**
   * The items submission's prompt_template, kept so an item retried with a corrected input gets
   * its prompt rebuilt; null when none was given, for a batch over files, and for batches older
   * than it.
   */
  prompt_template: z.string().nullable().default(null),
  /** The output schema's top-level property names in the schema's order (jsonb keeps keys sorted its own way). */
  output_fields: z.array(z.string()).default([]),
  /**
   * Catalog prices (US dollars per million tokens) at submission of every model the batch calls:
   * its model and each judge's, by catalog name. The worker prices each model's tokens at its own
   * (empty in batches older than it: their attempts are priced at the batch's price columns).
   */
  prices: z.record(z.string(), modelPriceSchema).default({}),
  /** `provider_batch`: the items go through the provider's batch API (server/batches/provider-lane/). */
  lane: z.enum(["live", "provider_batch"]).default("live"),
  /**
   * The share of the price a provider batch costs (the model's catalog batch_discount at
   * submission); set on provider_batch batches only.
   */
  batch_discount: z.number().min(0).max(1).nullable().default(null),
  /** The provider whose batch API a provider_batch batch uses (its model's, at submission). */
  batch_provider: z.enum(["openai", "anthropic"]).nullable().default(null),
  /**
   * The submission's `examples`, resolved once at submission (a later add to the set changes
   * nothing here): the set's version and, in md5(item_key) order, the first `count` + 1 of its
   * items (the one past `count` stands in for an item that is itself an example). Null: none.
   */
  examples: examplesSnapshotSchema.nullable().default(null),
});
export type ExecutionSpec = z.infer<typeof specSchema>;
export type ExamplesSnapshot = z.infer<typeof examplesSnapshotSchema>;

export type SubmissionOrigin = { kind: "api" } | { kind: "tool"; runId: string; toolCallId: string };

/**
 * A sub-agent definition as a spec snapshots it and a worker runs it (the shape of
 * server/agent/registry.ts's SubagentDefinition, which callers resolve by name and pass in).
 */
export interface SpecDefinition {
  name: string;
  description: string;
  systemPrompt: string;
  /** Tool group names (server/tools/index.ts); validated by the config schema at start. */
  toolGroups: string[];
  /** A catalog model name to use instead of the caller's; undefined = inherit the caller's model. */
  model?: string;
  /** Most model steps (LLM calls) one run may take. */
  maxTurns: number;
  /** Execution time limit once a slot is held. */
  timeoutMs: number;
  /** Typed results: the final answer is structured output valid against this JSON Schema. */
  outputSchema?: OutputSchema;
}

/** Snapshots the boundary for a submission, from a definition its caller resolved. */
export function buildExecutionSpec(args: {
  userId: string;
  threadId: string;
  definition: SpecDefinition;
  /** The sub-agents this caller could choose from (the allowlist checked at submission). */
  allowedSubagents: string[];
  /** The caller's model (a resolved model, or its catalog name for callers without one). */
  model: { name: string; catalogName?: string };
  origin: SubmissionOrigin;
  /** Groups this batch adds to the definition's (a batch over files adds `workspace`). */
  extraToolGroups?: readonly string[];
  kind?: ExecutionKind;
  /** The submission's output schema (wins over the definition's). */
  outputSchema?: OutputSchema | null;
  checks?: readonly SpecCheck[];
  goldenSet?: { id: string; version: number } | null;
  /** The object items' field names, first seen first. */
  inputFields?: readonly string[];
  /** An items submission's template (not a files batch's). */
  promptTemplate?: string | null;
  lane?: "live" | "provider_batch";
  /** The examples resolved from a golden set (server/batches/examples.ts). */
  examples?: ExamplesSnapshot | null;
}): ExecutionSpec {
  const def = args.definition;
  const callerModel = args.model.catalogName ?? args.model.name;
  const modelName = def.model ?? callerModel;
  return {
    version: EXECUTION_SPEC_VERSION,
    kind: args.kind ?? "subagent",
    subagent: {
      name: def.name,
      description: def.description,
      system_prompt: def.systemPrompt,
      tool_groups: [...def.toolGroups],
      model: def.model ?? null,
      max_turns: def.maxTurns,
      timeout_seconds: def.timeoutMs / 1000,
    },
    model: { name: modelName },
    tool_groups: [...new Set([...def.toolGroups, ...(args.extraToolGroups ?? [])])],
    delegation: { task: false, agent_swarm: false, batch_task: false },
    caller: {
      user_id: args.userId,
      thread_id: args.threadId,
      role: "owner",
      origin: args.origin.kind,
      run_id: args.origin.kind === "tool" ? args.origin.runId : null,
      tool_call_id: args.origin.kind === "tool" ? args.origin.toolCallId : null,
    },
    authorization: { allowed_subagents: [...args.allowedSubagents] },
    output_schema: args.outputSchema ?? def.outputSchema ?? null,
    checks: [...(args.checks ?? [])],
    golden_set: args.goldenSet ?? null,
    input_fields: [...(args.inputFields ?? [])],
    prompt_template: args.promptTemplate ?? null,
    output_fields: outputFieldsOf(args.outputSchema ?? def.outputSchema ?? null),
    // Snapshotted by the one writer (submit.ts writeBatch), which reads the catalog.
    prices: {},
    lane: args.lane ?? "live",
    batch_discount: null,
    batch_provider: null,
    examples: args.examples ?? null,
  };
}

/** An object schema's top-level property names, in its order. */
function outputFieldsOf(schema: OutputSchema | null): string[] {
  const properties = schema?.properties;
  return properties !== null && typeof properties === "object" && !Array.isArray(properties) ? Object.keys(properties) : [];
}

/** Validates a stored spec (a hand-edited or foreign row fails here, not in the model call). */
export function parseExecutionSpec(value: unknown): ExecutionSpec {
  const parsed = specSchema.safeParse(value);
  if (!parsed.success) throw new Error(`invalid execution spec: ${parsed.error.issues[0]?.message ?? "malformed"}`);
  return parsed.data;
}

/**
 * The definition a worker runs for a batch item: the snapshot, whatever the worker's own
 * configuration calls by that name today (same prompt, tool groups, turns, time limit, model).
 * Sub-agents of batch items never get delegation tools (the executor gives batch items none;
 * the spec records it).
 */
export function snapshotDefinition(spec: ExecutionSpec): SpecDefinition & { builtin: false } {
  const def = spec.subagent;
  return {
    name: def.name,
    description: def.description,
    systemPrompt: def.system_prompt,
    toolGroups: spec.tool_groups,
    ...(def.model ? { model: def.model } : {}),
    maxTurns: def.max_turns,
    timeoutMs: def.timeout_seconds * 1000,
    ...(spec.output_schema ? { outputSchema: spec.output_schema } : {}),
    builtin: false,
  };
}

/** The results table's columns as the spec names them: the checks, the object items' fields and the output schema's top-level properties. */
export function specColumns(b: { executionSpec: unknown }): { checks: string[]; inputFields: string[]; outputFields: string[] } {
  // Read from the stored JSON, not parseExecutionSpec: a projection never fails on a spec field it does not show.
  const spec = (b.executionSpec ?? {}) as { checks?: unknown; input_fields?: unknown; output_fields?: unknown; output_schema?: unknown };
  const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);
  const checks = Array.isArray(spec.checks)
    ? spec.checks.map((c: unknown) => (c as { name?: unknown })?.name).filter((n): n is string => typeof n === "string")
    : [];
  // A spec written before output_fields: the schema's keys, in jsonb's order.
  const outputFields = Array.isArray(spec.output_fields)
    ? strings(spec.output_fields)
    : outputFieldsOf((spec.output_schema ?? null) as OutputSchema | null);
  return { checks, inputFields: strings(spec.input_fields), outputFields };
}
