import { z } from "zod";

/**
 * The `task` tool's input schema and output type, in a file of their own (it imports nothing but
 * zod) so the simulator's chat grammar and answers can use them without importing the tool.
 */

/** How a delegated run ended (the executor's SubagentRunStatus; task.ts assigns one to the other). */
export type TaskRunStatus = "completed" | "failed" | "cancelled" | "timed_out";

export const taskInputSchema = z.object({
  subagent: z.string().min(1).max(40).default("general").describe("Which sub-agent to use (default general)."),
  description: z.string().min(1).max(200).describe("A short label for this task (3-8 words), shown to the user."),
  prompt: z
    .string()
    .min(1)
    .max(100_000)
    .describe("The complete, self-contained instructions and material; the sub-agent sees nothing else."),
});
export type TaskInput = z.infer<typeof taskInputSchema>;

/** Why a call did not run: over the per-response limit, over the per-run total, or invalid. */
export type TaskNotRunReason = "response_limit" | "run_total" | "invalid" | "capacity";

/** What the card renders and what is stored in the tool part. */
export interface TaskToolOutput {
  runId: string | null;
  status: TaskRunStatus | "not_run";
  definition: string;
  model: string | null;
  usage: { inputTokens: number; outputTokens: number };
  durationMs: number;
  stopReason: string | null;
  result: string;
  error?: string;
  notRunReason?: TaskNotRunReason;
}
