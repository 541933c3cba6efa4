import type { ToolSet } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";
import { AppError } from "@/server/errors";
import { type ApprovalHandling, buildGroupTools, recordTools, type ToolCallRecorder } from "@/server/tools";
import { approvalMatcherFor } from "@/server/tools/approval";
import { assertSameArguments, createChildApproval, deniedError, waitForDecision } from "../chat-approvals";
import type { SubagentDefinition } from "../registry";
import type { RunAdmission } from "./admission";

/**
 * The toolset stage: the tools the definition's groups grant the run, each call recorded, with
 * the approval wrapper (tools.require_approval: a batch item's matching call parks it, a chat
 * child's waits for the decision), the idempotency key of each call (durable steps) and, for a
 * deferred batch-item run row, the row written before any tool runs.
 */
export interface ToolsetArgs {
  db: Db;
  config: FlotillaConfig;
  definition: SubagentDefinition;
  userId: string;
  threadId?: string;
  runId: string;
  signal: AbortSignal;
  recorder: ToolCallRecorder;
  /** Durable steps: the idempotency key of a call by its id. */
  idempotencyKey?: (toolCallId: string) => string;
  /** What a call that needs a person does (askForApproval or childApprovalGate). */
  approval: ApprovalHandling;
  /** Further delegation tools (a chat child's nested `task`), recorded like the rest. */
  delegation?: ToolSet;
  /** A deferred run row: written before the first tool runs. */
  ensureRunRow?: () => Promise<void>;
}

/** A batch item's matching call ends the attempt on the AI SDK's approval request (the item parks). */
export const askForApproval: ApprovalHandling = { mode: "ask" };

export async function runToolset(args: ToolsetArgs): Promise<ToolSet> {
  const { db, config, userId, runId, signal, idempotencyKey } = args;
  const groupCtx = { db, config, userId, threadId: args.threadId ?? null, runId, signal, idempotencyKey };
  const matcher = approvalMatcherFor(config, args.definition.name);
  const built = {
    ...(await buildGroupTools(args.definition.toolGroups, groupCtx, args.recorder, matcher, args.approval)),
    ...(args.delegation ? recordTools(args.delegation, args.recorder) : {}),
  };
  return args.ensureRunRow ? withRunRow(built, args.ensureRunRow) : built;
}

/**
 * A chat child's call that needs a person: its row, then the wait, with the run's clock stopped
 * and its slot given back while every call of it waits; the slot is taken again before an
 * approved call runs, and the call runs only with the arguments approved.
 */
export function childApprovalGate(
  db: Db,
  run: { userId: string; threadId?: string; runId: string; timeoutSeconds: number; signal: AbortSignal },
  admission: RunAdmission,
): ApprovalHandling {
  let waiting = 0;
  return {
    mode: "wait",
    gate: async (call) => {
      if (!run.threadId) throw new AppError("forbidden", `${call.toolName} needs a person's approval, and this run has no thread to ask in`);
      const approval = await createChildApproval(db, {
        userId: run.userId,
        threadId: run.threadId,
        runId: run.runId,
        toolCallId: call.toolCallId,
        toolName: call.toolName,
        input: call.input,
        timeoutSeconds: run.timeoutSeconds,
      });
      if (waiting++ === 0) admission.pauseForPerson();
      let decision: Awaited<ReturnType<typeof waitForDecision>>;
      try {
        decision = await waitForDecision(db, { approval, timeoutSeconds: run.timeoutSeconds, signal: run.signal });
      } finally {
        if (--waiting === 0 && !run.signal.aborted) admission.startClock();
      }
      if (decision.status !== "approved") throw deniedError(decision.reason);
      await admission.readmit();
      assertSameArguments(decision, call.input);
    },
  };
}

/** Tools that first make sure the run row exists (a deferred batch-item row), then run. */
export function withRunRow(tools: ToolSet, ensureRow: () => Promise<void>): ToolSet {
  return Object.fromEntries(
    Object.entries(tools).map(([name, t]) => {
      const execute = t.execute;
      if (!execute) return [name, t];
      const wrapped = async (...a: Parameters<typeof execute>) => {
        await ensureRow();
        return execute(...a);
      };
      return [name, { ...t, execute: wrapped }];
    }),
  ) as ToolSet;
}
