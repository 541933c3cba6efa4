import type { ToolSet, UIMessageStreamWriter } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";
import type { ResolvedModel } from "@/server/models/types";
import { buildGroupTools } from "@/server/tools";
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

/** The lead agent's toolset: its own tool groups (lead.tool_groups), then each delegation mode's tools. */
export async function buildLeadTools(ctx: LeadToolContext): Promise<ToolSet> {
  return {
    ...(await buildGroupTools(ctx.config.lead.tool_groups, {
      db: ctx.db,
      config: ctx.config,
      userId: ctx.userId,
      threadId: ctx.threadId,
      runId: ctx.runId,
      signal: ctx.abortSignal,
    })),
    ...(ctx.config.subagents.enabled ? { task: createTaskTool(ctx) } : {}),
    ...(ctx.config.subagents.enabled ? { agent_swarm: createSwarmTool(ctx) } : {}),
    ...(await createBatchTools(ctx)),
  };
}
