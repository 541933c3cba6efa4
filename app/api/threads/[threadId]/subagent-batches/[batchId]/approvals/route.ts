import { batchApprovalsResultSchema, batchApprovalsSchema, waitingApprovalsSchema } from "@/lib/api/approvals";
import { decideBatchApprovals, listWaitingApprovals } from "@/server/batches/approvals";
import { batchScope, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** "Approve all" (or deny all) for one tool in one batch: every waiting call of it. Answers `{ decided: n }`. */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const scope = await batchScope(req, await ctx.params);
  const { tool, decision, reason } = await readJson(req, batchApprovalsSchema, 16 * 1024);
  return json(project(batchApprovalsResultSchema, await decideBatchApprovals(scope.db, { ...scope, tool, decision, reason })));
});

/** The calls of this batch waiting for a person, oldest first (the panel's list). */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const scope = await batchScope(req, await ctx.params);
  return json(project(waitingApprovalsSchema, { approvals: await listWaitingApprovals(scope.db, scope) }));
});
