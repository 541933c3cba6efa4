import type { UIMessageStreamWriter } from "ai";
import type { BackgroundReceipt } from "@/lib/api/subagents";
import type { SwarmResult } from "@/lib/api/swarm";
import { log, type Logger } from "@/server/log";
import { getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import { admitSwarm } from "./admission";
import { systemClock } from "./clock";
import { swarmEntries } from "./entries";
import { swarmReceipt } from "./receipt";
import { scheduleEntries } from "./scheduling";
import { SwarmRows } from "./settlement";
import { SwarmTrace } from "./trace";
import type { SwarmContext, SwarmEntry } from "./types";

/**
 * One agent_swarm call: validate everything, preflight resumes, then run every item as an
 * ordinary sub-agent run (kind "swarm_child", parent = the lead run) through the same
 * executor and process capacity as `task`, under the local scheduler's backpressure.
 * The result is an ordered, bounded projection over those child runs.
 *
 * In stages, each a module: admission (./admission.ts) → entries and concurrency
 * (./entries.ts) → the scheduler (./scheduling.ts over ./scheduler.ts) → each child's attempt
 * (./attempt.ts) → settlement (./settlement.ts); or, with `background: true`, the receipt
 * (./receipt.ts) and the same stages after the response.
 */

export type { SwarmContext } from "./types";

/** Runs an agent_swarm call to the end and returns its result (`background` is ignored). */
export function runSwarm(ctx: SwarmContext, rawInput: unknown): Promise<SwarmResult> {
  // Without allowBackground the call never answers a receipt.
  return swarmCall(ctx, rawInput, false) as Promise<SwarmResult>;
}

/**
 * The agent_swarm tool: runSwarm, or with `background: true` in the input, the receipt once the
 * children's rows exist, the items running after the response (server/agent/background.ts).
 */
export function runSwarmCall(ctx: SwarmContext, rawInput: unknown): Promise<SwarmResult | BackgroundReceipt> {
  return swarmCall(ctx, rawInput, true);
}

/** One call's parts that every stage after admission shares. */
interface AdmittedCall {
  ctx: SwarmContext;
  runtime: SubagentRuntime;
  trace: SwarmTrace;
  logger: Logger;
  startedAt: number;
  entries: SwarmEntry[];
  concurrency: number;
}

async function swarmCall(ctx: SwarmContext, rawInput: unknown, allowBackground: boolean): Promise<SwarmResult | BackgroundReceipt> {
  const clock = ctx.clock ?? systemClock;
  const startedAt = clock.now();
  const logger = log.child({ run_id: ctx.leadRunId, tool_call_id: ctx.toolCallId, tool: "agent_swarm" });
  const runtime = ctx.runtime ?? getSubagentRuntime();
  const trace = new SwarmTrace({
    db: ctx.db,
    leadRunId: ctx.leadRunId,
    toolCallId: ctx.toolCallId,
    writer: ctx.writer,
    now: () => clock.now(),
    startedAt,
    logger,
  });

  const admission = await admitSwarm(ctx, rawInput, trace, logger);
  if (!admission.admitted) return admission.result;
  const { plan, release } = admission;
  const call: AdmittedCall = { ctx, runtime, trace, logger, startedAt, ...swarmEntries(plan, admission.resumes) };
  // Only the lead delegates in the background.
  if (allowBackground && plan.background && (ctx.depth ?? 0) === 0)
    // The response has ended: no live UI part to write to, the trace goes to run_events only.
    return swarmReceipt(ctx, runtime, call.entries, release, (signal, runIds) =>
      executeSwarm(call, { signal, writer: undefined }, runIds),
    );
  try {
    return await executeSwarm(call, { signal: ctx.signal, writer: ctx.writer });
  } finally {
    release();
  }
}

/** Runs every entry; `firstRunIds` are the entries' pending rows made before a background answer. */
async function executeSwarm(
  call: AdmittedCall,
  run: { signal: AbortSignal; writer: UIMessageStreamWriter | undefined },
  firstRunIds?: string[],
): Promise<SwarmResult> {
  const { ctx, trace } = call;
  const clock = ctx.clock ?? systemClock;
  trace.setWriter(run.writer);
  const rows = new SwarmRows(call.entries, call.concurrency, clock, call.startedAt);
  trace.attach(() => rows.snapshot());
  const result = await scheduleEntries({ ...call, rows, firstRunIds, signal: run.signal, clock, timings: ctx.timings });
  const final = rows.settle(result);
  trace.record("swarm_completed", { aggregate: final.aggregate });
  trace.publish();
  await trace.flush();
  call.logger.info({ status: final.aggregate.status, counts: final.aggregate.counts }, "agent_swarm settled");
  return final;
}
