import type { ToolExecutionOptions } from "ai";
import { AppError } from "@/server/errors";
import { log } from "@/server/log";
import type { LeadToolContext } from "./context";

/**
 * What a batch tool answers when it fails: an AppError's own message (it tells the model what to
 * change), anything else logged with its stack and answered with `unavailable`, never its text.
 */
function refusal(ctx: LeadToolContext, toolName: string, err: unknown, unavailable: string): { error: string } {
  if (err instanceof AppError) return { error: err.message };
  log.error({ err, run_id: ctx.runId }, `${toolName} failed`);
  return { error: unavailable };
}

/** A batch tool's `execute`: `run`, its failure answered as a refusal (every batch tool fails the same way). */
export function refusing<I, O>(
  ctx: LeadToolContext,
  toolName: string,
  unavailable: string,
  run: (input: I, options: ToolExecutionOptions) => Promise<O>,
): (input: I, options: ToolExecutionOptions) => Promise<O | { error: string }> {
  return async (input, options) => {
    try {
      return await run(input, options);
    } catch (err) {
      return refusal(ctx, toolName, err, unavailable);
    }
  };
}
