import type { RunSubagentOptions } from "../executor";
import { resolveSubagent } from "../registry";
import type { SwarmPlan } from "./input";
import type { ResolvedResume } from "./resume";
import type { SwarmContext, SwarmEntry } from "./types";
import type { SubagentRuntime } from "@/server/runtime/admission";

/**
 * The entries stage: what the scheduler runs, resumes first (in map order) then the new items,
 * at the plan's concurrency; and the child run each entry becomes (its row's fields), the same
 * for a foreground attempt and a background receipt's pending row.
 */

export interface SwarmEntries {
  entries: SwarmEntry[];
  /** The requested concurrency (the scheduler's effective capacity moves below it). */
  concurrency: number;
}

export function swarmEntries(plan: SwarmPlan, resumes: ResolvedResume[]): SwarmEntries {
  return {
    entries: [
      ...resumes.map((r) => ({
        item_id: r.item_id,
        profile: r.profile,
        prompt: r.prompt,
        history: r.history,
        resumedFrom: r.source_run_id,
      })),
      ...plan.items.map((i) => ({ item_id: i.item_id, profile: i.profile, prompt: i.task, resumedFrom: null })),
    ],
    concurrency: plan.concurrency,
  };
}

/** The child run of one entry: kind swarm_child, one level below the caller, under its tool call. */
export function childRun(ctx: SwarmContext, runtime: SubagentRuntime, entry: SwarmEntry) {
  const { definition, model } = resolveSubagent(runtime.config, entry.profile, ctx.model);
  return {
    userId: ctx.userId,
    threadId: ctx.threadId,
    parentRunId: ctx.leadRunId,
    rootRunId: ctx.rootRunId ?? ctx.leadRunId,
    kind: "swarm_child" as const,
    definition,
    prompt: entry.prompt,
    model,
    depth: (ctx.depth ?? 0) + 1,
    toolCallId: ctx.toolCallId,
  } satisfies Omit<RunSubagentOptions, "signal">;
}
