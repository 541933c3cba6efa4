import { z } from "zod";

/** Projection of an agent run (lead or sub-agent) as the API and the chat cards read it. Never carries prompts, results or transcripts. */
export const RUN_STATUSES = ["pending", "running", "completed", "failed", "cancelled", "timed_out", "interrupted"] as const;
export type RunStatusName = (typeof RUN_STATUSES)[number];
export const TERMINAL_RUN_STATUSES: readonly RunStatusName[] = ["completed", "failed", "cancelled", "timed_out", "interrupted"];

/** One tool call of a run's transcript, with bounded previews (lib: the cards and item detail render it). */
export const toolCallRecordSchema = z.object({
  id: z.string(),
  name: z.string(),
  args_preview: z.string(),
  result_preview: z.string(),
  status: z.enum(["ok", "error"]),
  duration_ms: z.number().int().nonnegative(),
});
export type ToolCallRecord = z.infer<typeof toolCallRecordSchema>;

export const runProjectionSchema = z.object({
  id: z.string(),
  thread_id: z.string().nullable(),
  parent_run_id: z.string().nullable(),
  root_run_id: z.string().nullable(),
  kind: z.enum(["lead", "task", "swarm_child", "batch_item"]),
  definition: z.string(),
  model: z.string(),
  tool_call_id: z.string().nullable(),
  depth: z.number().int(),
  status: z.enum(RUN_STATUSES),
  stop_reason: z.string().nullable(),
  error: z.string().nullable(),
  usage: z.object({
    input_tokens: z.number(),
    output_tokens: z.number(),
    cached_input_tokens: z.number(),
    cache_write_tokens: z.number(),
  }),
  created_at: z.string(),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  /** Execution time (started → finished, or → now while running); null before it started. */
  duration_ms: z.number().nullable(),
  /** Tool calls the run made (the list is on the run detail). */
  tool_calls: z.number().int().nonnegative(),
  /** US dollars at the run's catalog entry prices; 0 for the simulator or an unpriced model. */
  cost_usd: z.number().nonnegative(),
});
export type RunProjection = z.infer<typeof runProjectionSchema>;

export const stopReportSchema = z.object({
  run_id: z.string(),
  /** Descendants that were active and are now stopped (queued ones included). */
  stopped: z.number().int(),
  /** Descendants still active afterwards (running in another process, or not finalized in time). */
  failed_to_stop: z.number().int(),
});
export type StopReportProjection = z.infer<typeof stopReportSchema>;

/** GET /api/threads/{thread_id}/runs/{run_id}: the run plus the outcome of its latest Stop. */
export const runDetailSchema = runProjectionSchema.extend({
  stop_report: z.object({ stopped: z.number().int(), failed_to_stop: z.number().int() }).nullable(),
  /** The run's tool calls in the order they finished (previews bounded). */
  tool_call_list: z.array(toolCallRecordSchema),
});
export type RunDetail = z.infer<typeof runDetailSchema>;

export function isTerminalRunStatus(status: string): boolean {
  return (TERMINAL_RUN_STATUSES as readonly string[]).includes(status);
}
