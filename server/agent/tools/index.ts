import type { ToolSet } from "ai";
import { buildGroupTools, traceTools } from "@/server/tools";
import { approvedLeadCall } from "../chat-approvals";
import { approvalMatcher, runApprovalPatterns } from "@/server/tools/approval";
import { createBatchTools } from "./batch";
import type { LeadToolContext } from "./context";
import { createSwarmTool } from "./swarm";
import { createTaskTool } from "./task";

export type { LeadToolContext };

/** The lead agent's toolset: its own tool groups (lead.tool_groups), then each delegation mode's tools. */
export async function buildLeadTools(ctx: LeadToolContext): Promise<ToolSet> {
  return {
    // A call tools.require_approval matches ends the response with the AI SDK's approval request
    // (server/agent/chat-approvals.ts); once approved, it runs only with the arguments approved.
    ...(await buildGroupTools(
      ctx.config.lead.tool_groups,
      {
        db: ctx.db,
        config: ctx.config,
        userId: ctx.userId,
        threadId: ctx.threadId,
        runId: ctx.runId,
        signal: ctx.abortSignal,
      },
      undefined,
      approvalMatcher(runApprovalPatterns(ctx.config, [])),
      {
        mode: "ask",
        verify: async (call) => {
          await approvedLeadCall(ctx.db, { threadId: ctx.threadId, toolCallId: call.toolCallId, input: call.input });
        },
      },
    )),
    ...traceTools({
      ...(ctx.config.subagents.enabled ? { task: createTaskTool(ctx) } : {}),
      ...(ctx.config.subagents.enabled ? { agent_swarm: createSwarmTool(ctx) } : {}),
      ...(await createBatchTools(ctx)),
    }),
  };
}
