import { batchProjectionSchema } from "@/lib/api/batches";
import { variantRequestSchema } from "@/lib/api/variants";
import { batchSubagent } from "@/server/agent/registry";
import { projectBatch } from "@/server/batches/projection";
import { submitBatch } from "@/server/batches/submit";
import { planVariant } from "@/server/batches/variant";
import { recordSubmittedBatch } from "@/server/chat/batch-receipt";
import { batchScope, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/**
 * A variant: the batch's items run again with a changed template, model, schema or checks
 * (optionally only the items `only` picks). Checked as a submission (same 400s); 201 on create,
 * 200 with the same batch on a replay of its submission_key.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const request = await readJson(req, variantRequestSchema, config.http.max_body_bytes);
  const { original, input, itemKeys, model } = await planVariant(db, { userId, threadId, batchId, request, config });
  const subagent = batchSubagent(config, input.subagent);
  const definition = { ...subagent.definition, model };
  const { batch, created } = await submitBatch(db, {
    userId,
    threadId,
    input,
    config,
    definition,
    allowedSubagents: subagent.allowedSubagents,
    variant: { of: original.id, itemKeys },
  });
  await recordSubmittedBatch(db, { userId, threadId, batch, input });
  const leaseSeconds = config.subagent_batches.lease_seconds;
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds })), created ? 201 : 200);
});
