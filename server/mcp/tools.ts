import "server-only";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import { batchSubmissionInputSchema } from "@/lib/api/batch-tools";
import { batchListSchema, batchProjectionSchema, itemPageSchema, submissionFieldsShape } from "@/lib/api/batches";
import { type BatchSubmission, isFileSubmission, isGoldenSubmission } from "@/lib/api/files";
import { isProblem, parseItem, submissionLimits } from "@/lib/batch-rules";
import type { FlotillaConfig } from "@/lib/config";
import { batchSubagent, describeSubagents } from "@/server/agent/registry";
import { getOwnedBatch, threadOfSubmission } from "@/server/batches/owned";
import { projectBatch, projectBatches, toItemPage } from "@/server/batches/projection";
import { BATCH_LIST_MAX, ITEM_PAGE_DEFAULT, ITEM_PAGE_MAX, listBatches, listItems } from "@/server/batches/repository";
import { itemRows, submitBatch } from "@/server/batches/submit";
import type { BatchRow } from "@/server/batches/types";
import { createThread, DERIVED_TITLE_MAX, getThreadForUser, shortTitle } from "@/server/chat/threads";
import type { Db } from "@/server/db/client";
import { AppError, errorText } from "@/server/errors";
import { applyBatchControl, project } from "@/server/http/batch-scope";
import { assertBatchesEnabled, parseSubmissionBody } from "@/server/http/submission-input";
import { log } from "@/server/log";

/**
 * The MCP face's tools (served by server/mcp/serve.ts): the batch API's doors, projections, owned
 * lookups and controls, for one authenticated caller. A server and its tools are built per
 * request, so every call is scoped to that caller's batches. Each answers the API's JSON as
 * structuredContent and as one text block; a refusal is a tool error carrying the API's message.
 */

export interface McpCaller {
  db: Db;
  config: FlotillaConfig;
  userId: string;
}

const LIST_DEFAULT = 20;

/**
 * submit_batch's arguments are the JSON door's body plus thread_id. The SDK checks arguments
 * against inputSchema before a tool runs and refuses in its own words, so the schema accepts
 * any body and the door's parser judges it (its refusals name the field as the API does); the
 * listed JSON Schema (`meta`) still describes every field to clients.
 */
const documentedSubmission = z.toJSONSchema(
  batchSubmissionInputSchema.extend({
    submission_key: submissionFieldsShape.submission_key.describe(
      "Your key for this submission: submitting again with the same key answers the batch the first call made.",
    ),
    thread_id: z.string().optional().describe("One of your threads; without it, a new thread titled from the first item."),
  }),
  { target: "draft-7", io: "input" },
);
const { $schema: _draft, ...submissionJsonSchema } = documentedSubmission;
const submitBatchArgs = z.looseObject({ thread_id: z.string().optional() }).meta(submissionJsonSchema);

const batchIdArg = z.string().describe("A batch id (from submit_batch or list_batches).");

async function answer(tool: string, caller: McpCaller, run: () => Promise<Record<string, unknown>>): Promise<CallToolResult> {
  try {
    const value = await run();
    return { structuredContent: value, content: [{ type: "text", text: JSON.stringify(value) }] };
  } catch (err) {
    // Anything but an AppError is ours to fix: logged whole, answered without its text.
    if (!(err instanceof AppError)) log.error({ err, tool, user_id: caller.userId }, "MCP tool failed");
    return { isError: true, content: [{ type: "text", text: err instanceof AppError ? errorText(err) : "internal error" }] };
  }
}

async function batchJson(caller: McpCaller, batch: BatchRow) {
  const leaseSeconds = caller.config.subagent_batches.lease_seconds;
  return project(batchProjectionSchema, await projectBatch(caller.db, { batch, leaseSeconds }));
}

/** A new thread's title: the first item's prompt (a batch over files: its glob), cut as a first message's is. */
function titleOf(input: BatchSubmission): string {
  if (isFileSubmission(input)) return input.files;
  if (isGoldenSubmission(input)) return `golden set ${input.golden_set.id}`;
  const first = parseItem(input.items[0], 0);
  // The door has checked every item; a problem here only means a default title.
  if (isProblem(first)) return "";
  return shortTitle(itemRows([first], input.prompt_template)[0]!.prompt, DERIVED_TITLE_MAX);
}

/**
 * The batch a submission makes: in the caller's thread_id (404 before the body is read, as the
 * route answers), else in the thread an earlier submission with its key went to (so a repeated
 * call replays), else in a new thread committed with the batch (a refusal leaves none behind).
 */
async function submitInThread(caller: McpCaller, args: Record<string, unknown>): Promise<BatchRow> {
  const { db, config, userId } = caller;
  const { thread_id: threadId, ...body } = args;
  if (typeof threadId === "string") await getThreadForUser(db, { userId, threadId });
  assertBatchesEnabled(config);
  const input = parseSubmissionBody(body, submissionLimits(config.subagent_batches));
  const subagent = batchSubagent(config, input.subagent, input.model);
  const submitTo = async (tx: Parameters<typeof submitBatch>[0], into: string) =>
    (await submitBatch(tx, { userId, threadId: into, input, config, ...subagent })).batch;
  if (typeof threadId === "string") return submitTo(db, threadId);
  const earlier = await threadOfSubmission(db, { userId, submissionKey: input.submission_key });
  if (earlier) return submitTo(db, earlier);
  return db.transaction(async (tx) => submitTo(tx, (await createThread(tx, { userId, title: titleOf(input) })).id));
}

function submitBatchTool(server: McpServer, caller: McpCaller): void {
  const b = caller.config.subagent_batches;
  server.registerTool(
    "submit_batch",
    {
      title: "Submit a batch",
      description:
        "Run the same kind of work over many independent items in durable background workers. The arguments are " +
        "the body of POST /api/threads/{thread_id}/subagent-batches (submission_key; items, or files: a glob over " +
        "the thread's workspace; prompt_template, subagent, output_schema, checks, budgets) plus an optional thread_id. " +
        "Answers the batch (queued); read its progress with batch_status and its items with batch_results. " +
        `At most ${b.max_items_per_batch} items. Sub-agents:\n${describeSubagents(caller.config)}`,
      inputSchema: submitBatchArgs,
      outputSchema: batchProjectionSchema,
      annotations: { destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    (args) => answer("submit_batch", caller, async () => batchJson(caller, await submitInThread(caller, args))),
  );
}

function batchStatusTool(server: McpServer, caller: McpCaller): void {
  server.registerTool(
    "batch_status",
    {
      title: "Batch status",
      description: "One of your batches: status, counts by item status, progress, usage, cost, budget, verdicts and why it waits.",
      inputSchema: z.object({ batch_id: batchIdArg }),
      outputSchema: batchProjectionSchema,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ batch_id }) =>
      answer("batch_status", caller, async () => batchJson(caller, await getOwnedBatch(caller.db, { userId: caller.userId, batchId: batch_id }))),
  );
}

function batchResultsTool(server: McpServer, caller: McpCaller): void {
  server.registerTool(
    "batch_results",
    {
      title: "Batch results",
      description:
        "One page of a batch's items in order: key, input, status, result preview, typed output, checks, verdict, " +
        "error, usage. Filter by status or verdict; pass next_cursor as cursor for the next page.",
      inputSchema: z.object({
        batch_id: batchIdArg,
        status: z
          .string()
          .optional()
          .describe("Only items of this status: pending, queued, leased, running, awaiting_approval, succeeded, failed, cancelled."),
        verdict: z.string().optional().describe("Only items whose checks all passed (passed) or at least one failed (failed)."),
        cursor: z.string().optional().describe("next_cursor of the previous page."),
        limit: z.number().optional().describe(`Items per page, 1..${ITEM_PAGE_MAX} (default ${ITEM_PAGE_DEFAULT}).`),
      }),
      outputSchema: itemPageSchema,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ batch_id, status, verdict, cursor, limit }) =>
      answer("batch_results", caller, async () => {
        const { db, config, userId } = caller;
        const { threadId } = await getOwnedBatch(db, { userId, batchId: batch_id });
        const previewMaxChars = config.subagent_batches.result_preview_max_chars;
        const page = await listItems(db, { userId, threadId, batchId: batch_id, status, verdict, cursor, limit, previewMaxChars });
        return project(itemPageSchema, toItemPage(page, previewMaxChars));
      }),
  );
}

function cancelBatchTool(server: McpServer, caller: McpCaller): void {
  server.registerTool(
    "cancel_batch",
    {
      title: "Cancel a batch",
      description:
        "Cancel one of your batches: its unfinished items are cancelled (running ones are stopped), finished ones keep " +
        "their results. Cancelling a cancelled batch answers it unchanged; a completed or failed one is refused.",
      inputSchema: z.object({ batch_id: batchIdArg }),
      outputSchema: batchProjectionSchema,
      annotations: { destructiveHint: true, idempotentHint: true, openWorldHint: false },
    },
    ({ batch_id }) =>
      answer("cancel_batch", caller, async () => {
        const { db, config, userId } = caller;
        const { threadId } = await getOwnedBatch(db, { userId, batchId: batch_id });
        return batchJson(caller, await applyBatchControl(db, config, { userId, threadId, batchId: batch_id }, "cancel"));
      }),
  );
}

function listBatchesTool(server: McpServer, caller: McpCaller): void {
  server.registerTool(
    "list_batches",
    {
      title: "List batches",
      description: "Your batches across all your threads, newest first, each as batch_status shows it.",
      inputSchema: z.object({
        limit: z.number().optional().describe(`How many, 1..${BATCH_LIST_MAX} (default ${LIST_DEFAULT}).`),
      }),
      outputSchema: batchListSchema,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ limit }) =>
      answer("list_batches", caller, async () => {
        const { db, config, userId } = caller;
        const batches = await listBatches(db, { userId, limit: limit ?? LIST_DEFAULT });
        const leaseSeconds = config.subagent_batches.lease_seconds;
        return project(batchListSchema, { batches: await projectBatches(db, { batches, leaseSeconds }) });
      }),
  );
}

/** A server with the five batch tools for this caller (one per request: see serve.ts). */
export function createMcpServer(caller: McpCaller): McpServer {
  const server = new McpServer({ name: "flotilla", version: "0.1.0" });
  for (const register of [submitBatchTool, batchStatusTool, batchResultsTool, cancelBatchTool, listBatchesTool]) register(server, caller);
  return server;
}
