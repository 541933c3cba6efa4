import { z } from "zod";

/**
 * Wire shapes of ordinary delegation (`task`): the tool's input, its result as the chat card
 * and the lead model read it, and the live `data-subagent` UI part. Safe for the browser.
 */

export type SubagentRunStatus = "completed" | "failed" | "cancelled" | "timed_out";

export interface SubagentUsage {
  /** All input tokens, cache reads and writes included. */
  inputTokens: number;
  outputTokens: number;
  /** Input tokens read from the provider's prompt cache. */
  cachedInputTokens?: number;
  /** Input tokens written to the provider's prompt cache. */
  cacheWriteTokens?: number;
  /**
   * A provider reported a count out of range (negative, NaN, or past CALL_TOKENS_MAX for one
   * call): that count is not counted (0), and the run's answer is refused (`invalid_usage`).
   */
  outOfRange?: boolean;
}

/**
 * The most tokens one count holds (a model call's, or a run's sum): far past any real context,
 * and small enough that a batch's and a user's day's sums stay inside PostgreSQL's bigint and
 * JavaScript's safe integers (100,000 items of 20 batches: 2e18 < 9.2e18).
 */
export const TOKEN_COUNT_MAX = 1_000_000_000_000;

/**
 * The most tokens one model call may report: ten times the largest context window there is.
 * More is no count at all (a broken or hostile provider), and billing it would spend every
 * budget and quota at once.
 */
export const CALL_TOKENS_MAX = 100_000_000;

/** Whether a count a provider reported for one call is out of range (left out is not). */
export function outOfRange(n: number | undefined): boolean {
  return n !== undefined && (Number.isNaN(n) || n < 0 || n > CALL_TOKENS_MAX);
}

/** A count a provider reported for one call, as it is counted: 0 when it is out of range. */
export function callTokenCount(n: number | undefined): number {
  return outOfRange(n) ? 0 : tokenCount(n);
}

/** Why an answer whose provider reported counts out of range is refused (its error, class `invalid_usage`). */
export const INVALID_USAGE_ERROR = `invalid_usage: the provider reported token counts out of range (negative, or more than ${CALL_TOKENS_MAX.toLocaleString("en-US")} for one call); the answer is refused and those counts are not billed`;

/** A token count as stored: a whole number from 0 to TOKEN_COUNT_MAX, whatever a provider sent (negative, NaN, 1e30). */
export function tokenCount(n: number | undefined): number {
  if (n === undefined || !Number.isFinite(n) || n <= 0) return 0;
  return Math.min(Math.round(n), TOKEN_COUNT_MAX);
}

/** A status change, for live UI (the task tool turns these into data parts). */
export interface SubagentStatusUpdate {
  runId: string;
  definition: string;
  model: string;
  status: "pending" | "running" | SubagentRunStatus;
  usage: SubagentUsage;
  /** Milliseconds since the slot was acquired (0 while pending). */
  durationMs: number;
  stopReason?: string | null;
  error?: string;
}

export const taskInputSchema = z.object({
  subagent: z.string().min(1).max(40).default("general").describe("Which sub-agent to use (default general)."),
  description: z.string().min(1).max(200).describe("A short label for this task (3-8 words), shown to the user."),
  prompt: z
    .string()
    .min(1)
    .max(100_000)
    .describe("The complete, self-contained instructions and material; the sub-agent sees nothing else."),
  background: z
    .boolean()
    .optional()
    .describe(
      "true: answer at once and let the sub-agent run on after this response; you are started again with its result when it settles.",
    ),
});
export type TaskInput = z.infer<typeof taskInputSchema>;

/** Why a call did not run: over the per-response limit, over the per-run total, or invalid. */
export type TaskNotRunReason = "response_limit" | "run_total" | "invalid" | "capacity";

/** What the card renders and what is stored in the tool part. */
export interface TaskToolOutput {
  runId: string | null;
  status: SubagentRunStatus | "not_run";
  definition: string;
  model: string | null;
  usage: { inputTokens: number; outputTokens: number };
  durationMs: number;
  stopReason: string | null;
  result: string;
  error?: string;
  notRunReason?: TaskNotRunReason;
}

/** Live status of a delegation, written as data part `data-subagent` with id = run id. */
export interface SubagentDataPart extends SubagentStatusUpdate {
  toolCallId: string;
  description: string;
}

/**
 * What `task` and `agent_swarm` answer at once with `background: true`: every child run of the
 * call (created before the answer). The lead's response ends without them; when the last one
 * settles the lead starts again in the thread (metadata `{ trigger: "children_settled", run_ids }`).
 */
export interface BackgroundReceipt {
  background: true;
  run_ids: string[];
}

export function isBackgroundReceipt(value: unknown): value is BackgroundReceipt {
  return !!value && typeof value === "object" && (value as { background?: unknown }).background === true;
}

/** One child of a background call as the lead's wake-up reads it. */
export interface SettledChild {
  run_id: string;
  /** The swarm item it ran (agent_swarm only). */
  item_id?: string;
  definition: string;
  status: string;
  /** A bounded excerpt of its answer, or its error. */
  result: string | null;
  error: string | null;
}

/** The lead's wake-up after the children of one background call settled (server/chat/children-wakeup.ts). */
export interface ChildrenSettledNotice {
  kind: "children_settled";
  tool: "task" | "agent_swarm";
  tool_call_id: string;
  run_ids: string[];
  /** The process running them died: unfinished children were marked interrupted, not restarted. */
  interrupted: boolean;
  children: SettledChild[];
}

/** The reply to a background call's wake-up is stored with this metadata. */
export const CHILDREN_SETTLED = "children_settled";
