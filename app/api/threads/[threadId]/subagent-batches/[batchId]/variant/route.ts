import { batchProjectionSchema } from "@/lib/api/batches";
import { variantDraftSchema, variantRequestSchema } from "@/lib/api/variants";
import { batchSubagent } from "@/server/agent/registry";
import { projectBatch } from "@/server/batches/projection";
import { submitBatch } from "@/server/batches/submit";
import { planVariant } from "@/server/batches/variant";
import { variantDraft } from "@/server/batches/variant-draft";
import { recordSubmittedBatch } from "@/server/chat/batch-receipt";
import { batchScope, project } from "@/server/http/batch-scope";
import { handle, json, readJson } from "@/server/http/route";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string; batchId: string }> };

/** The settings a variant starts from (the New batch dialog's prefill) and the catalog's model names. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  return json(project(variantDraftSchema, await variantDraft(db, { userId, threadId, batchId, config })));
});

/**
 * A variant: the batch's items run again with a changed template, model, schema, checks, pilot or lane
 * (optionally only the items `only` picks). Checked as a submission (same 400s); 201 on create,
 * 200 with the same batch on a replay of its submission_key.
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId, batchId } = await batchScope(req, await ctx.params);
  const request = await readJson(req, variantRequestSchema, config.http.max_body_bytes);
  const variant = await planVariant(db, {
    userId,
    threadId,
    batchId,
    request,
    config,
    resolveSubagent: (name) => batchSubagent(config, name),
  });
  const { batch, created } = await submitBatch(db, variant);
  await recordSubmittedBatch(db, { userId, threadId, batch, input: variant.input });
  const leaseSeconds = config.subagent_batches.lease_seconds;
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds })), created ? 201 : 200);
});
