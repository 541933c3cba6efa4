import type { ToolSet, UIMessageStreamWriter } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";
import type { ResolvedModel } from "@/server/models/types";
import { createBatchTools } from "./batch";
import { createSwarmTool } from "./swarm";
import { createTaskTool } from "./task";

/** Everything a lead-agent tool needs about the response it serves. */
export interface LeadToolContext {
  db: Db;
  config: FlotillaConfig;
  userId: string;
  threadId: string;
  /** The lead run (agent_runs row, kind "lead") of this response. */
  runId: string;
  model: ResolvedModel;
  abortSignal: AbortSignal;
  /** Live UI updates (data parts) while the response streams. */
  writer?: UIMessageStreamWriter;
}

/** The lead agent's toolset. Each delegation mode contributes its own tools. */
export async function buildLeadTools(ctx: LeadToolContext): Promise<ToolSet> {
  return {
    ...(ctx.config.subagents.enabled ? { task: createTaskTool(ctx) } : {}),
    ...(ctx.config.subagents.enabled ? { agent_swarm: createSwarmTool(ctx) } : {}),
    ...(await createBatchTools(ctx)),
  };
}
