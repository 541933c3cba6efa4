import { z } from "zod";

/**
 * Shapes of the swarm's projections: the tool result the lead model and the chat card read,
 * the live `data-swarm` UI part, and the tool's input schema (server/agent/swarm/input.ts checks
 * its rules; the simulator's grammar types its calls against it). Safe for the browser.
 */

export type SwarmItemStatus = "queued" | "running" | "suspended" | "completed" | "failed" | "cancelled";
export type SwarmAggregateStatus = "running" | "completed" | "partial" | "failed" | "cancelled" | "rejected";

/** One ordered row of the swarm result. Never carries prompts, tool arguments or raw tool output. */
export interface SwarmItemRow {
  item_id: string;
  status: SwarmItemStatus;
  profile: string;
  /** Wall time from the first start to settlement; null when the item never started. */
  duration_ms: number | null;
  /** rate_limit | timeout | provider | unknown | capacity_rejected | capacity_timeout | null */
  failure_class: string | null;
  /** Bounded excerpt of the child's final answer. */
  summary: string | null;
  /** Bounded error message of the last failed attempt. */
  error: string | null;
  /** The child run of the last attempt (null when nothing ever started). */
  child_run_id: string | null;
  /** Child runs started for this item (retries included). */
  attempts: number;
  /** Set on resumed items: the run this item continues. */
  resumed_from_run_id: string | null;
  /** Tokens of every child run of this item (retries included); absent on results stored before it. */
  usage?: { input_tokens: number; output_tokens: number };
}

export interface SwarmCounts {
  total: number;
  queued: number;
  running: number;
  suspended: number;
  completed: number;
  failed: number;
  cancelled: number;
}

export interface SwarmAggregate {
  status: SwarmAggregateStatus;
  counts: SwarmCounts;
  /** Items that started at least one child run. */
  started: number;
  concurrency: number;
  effective_capacity: number;
  duration_ms: number;
  usage: { input_tokens: number; output_tokens: number };
}

/** The agent_swarm tool result. */
export interface SwarmResult {
  aggregate: SwarmAggregate;
  items: SwarmItemRow[];
  /** Set when the call was refused before anything started (nothing ran). */
  rejection?: { code: string; message: string };
}

/** One trace entry as the chat shows it (a compact copy of the run_events row). */
export interface SwarmTraceEntry {
  /** Milliseconds since the swarm began. */
  t: number;
  type: string;
  item_id?: string;
  attempt?: number;
  delay_ms?: number;
  direction?: "down" | "up";
  effective_capacity?: number;
  status?: string;
  failure_class?: string | null;
  child_run_id?: string | null;
  detail?: string;
}

/** Live state written as the `data-swarm` UI part (id = the tool call id). */
export interface SwarmLiveData extends SwarmResult {
  tool_call_id: string;
  trace: SwarmTraceEntry[];
  /** Trace entries dropped to keep the part bounded. */
  trace_dropped: number;
}

const swarmExplicitItem = z
  .object({
    item_id: z.string().describe("Stable id of this item, unique within the call (letters, digits, . _ : -)."),
    profile: z.string().describe('Sub-agent profile to run this item, e.g. "general".'),
    task: z.string().describe("The complete, self-contained instruction for this item."),
  })
  .strict();

/**
 * The tool's input shape as the model sees it. Structural only: every bound and cross-field
 * rule is checked by parseSwarmInput so that a rejection is traced and explained in one place.
 */
export const swarmInputSchema = z
  .object({
    items: z
      .array(z.union([swarmExplicitItem, z.string()]))
      .optional()
      .describe(
        "Either explicit items [{item_id, profile, task}] or, with prompt_template, plain strings substituted for {{item}}.",
      ),
    profile: z.string().optional().describe('Template form only: the profile for every item (default "general").'),
    prompt_template: z
      .string()
      .optional()
      .describe("Template form only: a prompt containing {{item}}; every occurrence is replaced by each string item."),
    concurrency: z.number().optional().describe("How many children may run at once (default 3, capped at 5)."),
    max_concurrency: z.number().optional().describe("Alias of concurrency."),
    resume_run_ids: z
      .record(z.string(), z.string())
      .optional()
      .describe("Continue earlier child runs of this thread: map of child run id to the new prompt. Runs before new items."),
    background: z
      .boolean()
      .optional()
      .describe("true: answer at once and let the items run on after this response; you are started again with the results when all settle."),
  })
  .strict();

export type SwarmInput = z.input<typeof swarmInputSchema>;
