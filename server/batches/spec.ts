import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import { getSubagentDefinition, listSubagents, type SubagentDefinition } from "@/server/agent/registry";
import type { SubagentRuntime } from "@/server/runtime/admission";

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
  model: z.object({ name: z.string(), simulator: z.boolean() }),
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
  created_at: z.string(),
});
export type ExecutionSpec = z.infer<typeof specSchema>;

export type SubmissionOrigin = { kind: "api" } | { kind: "tool"; runId: string; toolCallId: string };

/** Sub-agents a caller may use for batch items. Every configured definition is open to every user. */
export function allowedSubagents(config: FlotillaConfig): string[] {
  return listSubagents(config).map((d) => d.name);
}

/** Snapshots the boundary for a submission. Throws validation_failed naming `subagent` when it is unknown. */
export function buildExecutionSpec(args: {
  config: FlotillaConfig;
  userId: string;
  threadId: string;
  subagent: string;
  /** The caller's model (a resolved model, or its catalog name for callers without one). */
  model: { name: string; simulator: boolean; catalogName?: string };
  origin: SubmissionOrigin;
  /** Groups this batch adds to the definition's (a batch over files adds `workspace`). */
  extraToolGroups?: readonly string[];
  kind?: ExecutionKind;
}): ExecutionSpec {
  const def: SubagentDefinition = getSubagentDefinition(args.subagent, args.config);
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
    model: { name: modelName, simulator: def.model ? def.model === "simulator" : args.model.simulator },
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
    authorization: { allowed_subagents: allowedSubagents(args.config) },
    created_at: new Date().toISOString(),
  };
}

/** Validates a stored spec (a hand-edited or foreign row fails here, not in the model call). */
export function parseExecutionSpec(value: unknown): ExecutionSpec {
  const parsed = specSchema.safeParse(value);
  if (!parsed.success) throw new Error(`invalid execution spec: ${parsed.error.issues[0]?.message ?? "malformed"}`);
  return parsed.data;
}

export interface RebuiltExecution {
  userId: string;
  threadId: string;
  /** Definition name to hand to runSubagent; resolved by `runtime` to the snapshot. */
  definition: string;
  /** The worker's runtime (same capacity and lanes) whose configuration carries the snapshot definition. */
  runtime: SubagentRuntime;
}

/**
 * Rebuilds the boundary for a worker: the snapshot definition replaces whatever the worker's
 * configuration calls by that name (same prompt, tool groups, turns, time limit, model), while
 * capacity stays the process's own. Sub-agents of batch items never get delegation tools (the
 * executor enforces that for kind batch_item; the spec records it).
 */
export function rebuildExecution(spec: ExecutionSpec, base: SubagentRuntime): RebuiltExecution {
  const def = spec.subagent;
  const config: FlotillaConfig = {
    ...base.config,
    subagents: {
      ...base.config.subagents,
      definitions: [
        ...base.config.subagents.definitions.filter((d) => d.name !== def.name),
        {
          name: def.name,
          description: def.description,
          system_prompt: def.system_prompt,
          tool_groups: spec.tool_groups,
          ...(def.model ? { model: def.model } : {}),
          max_turns: def.max_turns,
          timeout_seconds: def.timeout_seconds,
        },
      ],
    },
  };
  return {
    userId: spec.caller.user_id,
    threadId: spec.caller.thread_id,
    definition: def.name,
    runtime: { ...base, config },
  };
}
