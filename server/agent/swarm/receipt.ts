import type { BackgroundReceipt } from "@/lib/api/subagents";
import type { SwarmResult } from "@/lib/api/swarm";
import type { SubagentRuntime } from "@/server/runtime/admission";
import { settledChild, startBackground } from "../background";
import { childRun } from "./entries";
import type { SwarmContext, SwarmEntry } from "./types";

/**
 * The background receipt: the entries' pending child rows and the call's wake-up row are written
 * (server/agent/background.ts), the receipt answers at once, and `execute` runs the items after
 * the response with no live part to write to (the trace goes to run_events only). `release`
 * runs once the work is over, or at once when the receipt could not be written.
 */
export async function swarmReceipt(
  ctx: SwarmContext,
  runtime: SubagentRuntime,
  entries: SwarmEntry[],
  release: () => void,
  execute: (signal: AbortSignal, firstRunIds: string[]) => Promise<SwarmResult>,
): Promise<BackgroundReceipt> {
  try {
    const children = entries.map((entry) => ({
      ...childRun(ctx, runtime, entry),
      resumedFromRunId: entry.resumedFrom ?? undefined,
    }));
    return await startBackground(ctx.db, {
      userId: ctx.userId,
      threadId: ctx.threadId,
      leadRunId: ctx.leadRunId,
      toolCallId: ctx.toolCallId,
      tool: "agent_swarm",
      children,
      leadSignal: ctx.signal,
      onEnd: release,
      run: async (signal, runIds) => {
        const result = await execute(signal, runIds);
        return result.items.map((row, i) =>
          settledChild({
            run_id: row.child_run_id ?? runIds[i]!,
            item_id: row.item_id,
            definition: row.profile,
            status: row.status,
            result: row.summary,
            error: row.error,
          }),
        );
      },
    });
  } catch (err) {
    release();
    throw err;
  }
}
