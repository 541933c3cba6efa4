import { batchEstimateSchema } from "@/lib/api/batches";
import { batchSubagent } from "@/server/agent/registry";
import { estimateBatch } from "@/server/batches/estimate";
import { project, threadScope } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";
import { readSubmission } from "@/server/http/submission-input";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/**
 * What a submission would cost (any body the submission route takes: JSON, NDJSON, CSV), checked
 * exactly as a submission (the same 400s) and written nowhere.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId } = await threadScope(req, await ctx.params);
  const { input, locator } = await readSubmission(req, config);
  const estimate = await estimateBatch(db, { userId, threadId, input, locator, config, ...batchSubagent(config, input.subagent, input.model) });
  return json(project(batchEstimateSchema, estimate));
});
