import { jsonSchema, tool } from "ai";
import { z } from "zod";
import type { FlotillaConfig } from "@/lib/config";
import type { SubagentRuntime } from "@/server/runtime/admission";
import { textWithOutput } from "@/lib/api/model-facts";
import { listSubagents } from "../registry";
import type { Clock, SwarmTimings } from "../swarm/clock";

import { runSwarmCall } from "../swarm/run";
import { type SwarmInput, type SwarmResult, swarmInputSchema } from "@/lib/api/swarm";
import { type BackgroundReceipt, isBackgroundReceipt } from "@/lib/api/subagents";
import { backgroundModelOutput } from "./task";
import type { LeadToolContext } from "./context";

/**
 * `agent_swarm`: bounded foreground fan-out. The lead waits for every item and gets an
 * ordered, bounded projection to synthesize from. Only the lead has it (the executor never
 * gives it to sub-agents), so swarms cannot nest.
 */

export interface SwarmToolContext extends LeadToolContext {
  rootRunId?: string;
  runtime?: SubagentRuntime;
  timings?: Partial<SwarmTimings>;
  clock?: Clock;
}

function description(config: FlotillaConfig): string {
  const names = listSubagents(config).map((d) => d.name);
  return [
    `Run 1..${config.swarm.max_items} independent items in parallel as sub-agents and wait for all of them; ` +
      "results come back in input order with a bounded summary per item. Use it for several finite, independent " +
      "items that need one synthesis; use task for a single item or dependent steps.",
    "Two forms: explicit items [{item_id, profile, task}], or a template {profile, prompt_template with {{item}}, " +
      "items: [strings]} (ids item-1, item-2, ...). Each task must be self-contained.",
    `concurrency: default ${config.swarm.default_concurrency}, at most ${config.swarm.max_concurrency}. ` +
      "resume_run_ids {child_run_id: new prompt} continues earlier child runs of this thread with their history.",
    "background: true answers at once and runs the items after this response; you are started again with the results.",
    `Profiles: ${names.join(", ")}.`,
  ].join(" ");
}

/** What the lead model reads: ordered rows with their summaries, nothing UI-only. */
export function swarmModelText(output: SwarmResult): string {
  if (output.rejection) return `agent_swarm was rejected and nothing ran: ${output.rejection.message}`;
  const { counts, status } = output.aggregate;
  const lines = [
    `agent_swarm ${status}: ${counts.total} item${counts.total === 1 ? "" : "s"}, ${counts.completed} completed, ` +
      `${counts.failed} failed, ${counts.cancelled} cancelled. Results in input order:`,
  ];
  output.items.forEach((row, i) => {
    const head =
      `[${i + 1}] ${row.item_id} (${row.profile}) ${row.status}` +
      (row.failure_class ? ` [${row.failure_class}]` : "") +
      (row.child_run_id ? ` run ${row.child_run_id}` : "") +
      (row.attempts > 1 ? `, ${row.attempts} attempts` : "");
    lines.push("", head);
    if (row.summary) lines.push(row.summary);
    if (row.error && row.status !== "completed") lines.push(`error: ${row.error}`);
  });
  return lines.join("\n");
}

/** What the model reads of a swarm result: the text above, with the typed output beside it. */
export function swarmModelOutput(output: SwarmResult | BackgroundReceipt) {
  if (isBackgroundReceipt(output)) return backgroundModelOutput(output, "agent_swarm");
  return textWithOutput("agent_swarm", swarmModelText(output), output);
}

// The model sees the full shape; bounds and cross-field rules are checked (and traced) by runSwarm.
// Converted on first use, once per process (the lead builds this tool every turn).
const swarmSchema = jsonSchema<SwarmInput>(() => z.toJSONSchema(swarmInputSchema) as Exclude<Parameters<typeof jsonSchema>[0], () => unknown>);

export function createSwarmTool(ctx: SwarmToolContext) {
  return tool({
    description: description(ctx.config),
    inputSchema: swarmSchema,
    execute: async (input, options): Promise<SwarmResult | BackgroundReceipt> => {
      const signal = options.abortSignal ? AbortSignal.any([ctx.abortSignal, options.abortSignal]) : ctx.abortSignal;
      return runSwarmCall(
        {
          db: ctx.db,
          config: ctx.config,
          userId: ctx.userId,
          threadId: ctx.threadId,
          leadRunId: ctx.runId,
          rootRunId: ctx.rootRunId,
          model: ctx.model,
          signal,
          toolCallId: options.toolCallId,
          writer: ctx.writer,
          runtime: ctx.runtime,
          timings: ctx.timings,
          clock: ctx.clock,
        },
        input,
      );
    },
    toModelOutput: ({ output }) => swarmModelOutput(output),
  });
}
