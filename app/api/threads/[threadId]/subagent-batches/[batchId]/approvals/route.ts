import {
  batchApprovalsConflictSchema,
  batchApprovalsResultSchema,
  batchApprovalsSchema,
  waitingApprovalsSchema,
} from "@/lib/api/approvals";
import { decideBatchApprovals, listWaitingApprovals } from "@/server/batches/approvals";
import { AppError, errorBody } from "@/server/errors";
import { batchScope, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/**
 * "Approve all" (or deny all) for one tool in one batch: every waiting call of it, if exactly
 * `seen` wait. Answers `{ decided: n }`, or 409 `{ error, waiting }` deciding nothing.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const scope = await batchScope(req, await ctx.params);
  const { tool, decision, reason, seen } = await readJson(req, batchApprovalsSchema, 16 * 1024);
  const outcome = await decideBatchApprovals(scope.db, { ...scope, tool, decision, reason, seen });
  if ("waiting" in outcome) {
    const { status, body } = errorBody(new AppError("conflict", outcome.message));
    return json(project(batchApprovalsConflictSchema, { ...body, waiting: outcome.waiting }), status);
  }
  return json(project(batchApprovalsResultSchema, outcome));
});

/** The calls of this batch waiting for a person, in item order (the panel's list), and how many wait per tool. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const scope = await batchScope(req, await ctx.params);
  return json(project(waitingApprovalsSchema, await listWaitingApprovals(scope.db, scope)));
});
