import { batchSubagent } from "@/server/agent/registry";
import { batchListSchema, batchProjectionSchema } from "@/lib/api/batches";
import { project, threadScope } from "@/server/http/batch-scope";
import { projectBatch, projectBatches } from "@/server/batches/projection";
import { listBatches } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { recordSubmittedBatch } from "@/server/chat/batch-receipt";
import { handle, json } from "@/server/http/route";
import { readSubmission } from "@/server/http/submission-input";

export const dynamic = "force-dynamic";

type Ctx = { params: Promise<{ threadId: string }> };

/** The thread's batches, newest first. */
export const GET = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId } = await threadScope(req, await ctx.params);
  const batches = await listBatches(db, { userId, threadId });
  const leaseSeconds = config.subagent_batches.lease_seconds;
  return json(project(batchListSchema, { batches: await projectBatches(db, { batches, leaseSeconds }) }));
});

/**
 * Submit a batch (JSON, NDJSON or CSV upload): 201 on create, 200 with the same batch on an
 * idempotent replay. The thread's conversation records it (its receipt, and a default title).
 */
export const POST = handle(async (req: Request, ctx: Ctx) => {
  const { db, config, userId, threadId } = await threadScope(req, await ctx.params);
  const { input, locator } = await readSubmission(req, config);
  const subagent = batchSubagent(config, input.subagent, input.model);
  const { batch, created } = await submitBatch(db, { userId, threadId, input, locator, config, ...subagent });
  await recordSubmittedBatch(db, { userId, threadId: batch.threadId, batch, input });
  const leaseSeconds = config.subagent_batches.lease_seconds;
  return json(project(batchProjectionSchema, await projectBatch(db, { batch, leaseSeconds })), created ? 201 : 200);
});
