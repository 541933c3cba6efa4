import type { FlotillaConfig } from "@/lib/config";
import type { SwarmResult } from "@/lib/api/swarm";
import { AppError } from "@/server/errors";
import type { Logger } from "@/server/log";
import { getSubagentDefinition } from "../registry";
import { type SwarmPlan, parseSwarmInput } from "./input";
import { claimResumeSources, preflightResumes, type ResolvedResume } from "./resume";
import type { SwarmTrace } from "./trace";
import { bound, type SwarmContext } from "./types";

/**
 * The admission stage: everything is checked before any child starts (sub-agents enabled, one
 * swarm at a time per response, the whole input, every resume's lineage) and a refusal starts
 * nothing: it is traced and answered as a `rejected` result. An admitted call holds its lead
 * run's swarm place and its resume sources until `release`.
 */

export type SwarmAdmission =
  | { admitted: true; plan: SwarmPlan; resumes: ResolvedResume[]; release: () => void }
  | { admitted: false; result: SwarmResult };

/** Lead runs with a swarm in flight (one swarm at a time per response). */
const activeSwarms = new Set<string>();

export function isKnownProfile(config: FlotillaConfig): (name: string) => boolean {
  return (name) => {
    try {
      getSubagentDefinition(name, config);
      return true;
    } catch {
      return false;
    }
  };
}

export async function admitSwarm(
  ctx: SwarmContext,
  rawInput: unknown,
  trace: SwarmTrace,
  logger: Logger,
): Promise<SwarmAdmission> {
  let placed = false;
  try {
    if (!ctx.config.subagents.enabled)
      throw new AppError("forbidden", "sub-agents are disabled on this server (subagents.enabled = false)");
    if (activeSwarms.has(ctx.leadRunId))
      throw new AppError(
        "conflict",
        "another agent_swarm call of this response is still running; put all items into one agent_swarm call",
      );
    activeSwarms.add(ctx.leadRunId);
    placed = true;
    const known = isKnownProfile(ctx.config);
    const plan = parseSwarmInput(rawInput, ctx.config, known);
    const resumes = await preflightResumes(ctx.db, {
      userId: ctx.userId,
      threadId: ctx.threadId,
      modelName: ctx.model.catalogName,
      resumes: plan.resumes,
      isKnownProfile: known,
    });
    const releaseClaims = claimResumeSources(resumes.map((r) => r.source_run_id));
    const release = () => {
      releaseClaims();
      activeSwarms.delete(ctx.leadRunId);
    };
    return { admitted: true, plan, resumes, release };
  } catch (err) {
    if (placed) activeSwarms.delete(ctx.leadRunId);
    if (!(err instanceof AppError)) throw err;
    trace.record("tool_admission_rejected", { reason: err.message });
    await trace.flush();
    logger.info({ reason: err.message }, "agent_swarm call rejected");
    return { admitted: false, result: rejected(err, ctx.config) };
  }
}

function rejected(err: AppError, config: FlotillaConfig): SwarmResult {
  return {
    aggregate: {
      status: "rejected",
      counts: { total: 0, queued: 0, running: 0, suspended: 0, completed: 0, failed: 0, cancelled: 0 },
      started: 0,
      concurrency: config.swarm.default_concurrency,
      effective_capacity: 0,
      duration_ms: 0,
      usage: { input_tokens: 0, output_tokens: 0 },
    },
    items: [],
    rejection: { code: err.code, message: bound(err.message, 4_000) },
  };
}
