import { jsonSchema, type ToolSet, tool, zodSchema } from "ai";
import { sql } from "drizzle-orm";
import type { BatchSubmission } from "@/lib/api/files";
import type { FlotillaConfig } from "@/lib/config";
import { FILE_PLACEHOLDER } from "@/lib/batch-rules";
import { type CheckCount, loadCheckCounts, toBatchProjection } from "@/server/batches/projection";
import type { DbOrTx } from "@/server/db/client";
import { getBatch, listBatches, listItems } from "@/server/batches/repository";
import { threadBatches } from "@/server/batches/owned";
import { estimateBatch, laneCostUsd } from "@/server/batches/estimate";
import { envelopeProblem, refusal as submissionRefusal, type SubmitBatchArgs, submitBatch } from "@/server/batches/submit";
import type { BatchRow } from "@/server/batches/types";
import { planVariant } from "@/server/batches/variant";
import type { Db } from "@/server/db/client";
import { subagentBatches } from "@/server/db/schema";
import { AppError, zodMessage } from "@/server/errors";
import { log } from "@/server/log";
import { countLiveWorkers, livenessWindowSeconds } from "@/server/runtime/heartbeat";
import { CARD_PILOT_ITEMS } from "@/lib/api/approvals";
import { GOLDEN_CHECK_NAME } from "@/lib/api/batch-data";
import type { BatchEstimate } from "@/lib/api/batches";
import { type VariantRequest, variantRequestSchema } from "@/lib/api/variants";
import { approvedLeadCall } from "../chat-approvals";
import { batchSubagent, describeSubagents } from "../registry";
import {
  BATCH_RESULTS_DEFAULT_LIMIT,
  batchResultsInputSchema,
  batchStatusInputSchema,
  batchTaskInputSchema,
} from "@/lib/api/batch-tools";
import { createCompareBatchesTool } from "./compare";
import type { BatchToolFacts, LeadToolContext } from "./context";
import { refusing } from "./refusal";

/**
 * Durable batch tools for the lead agent. `batch_task` submits a batch and returns a receipt
 * at once (the work runs in worker processes, results stay out of the transcript);
 * `batch_status` reports compact counts, never results. Offered only when batches are enabled,
 * the database answers and a worker is alive (batch_status also for threads that already have
 * batches, batch_results only for those); submission re-checks the worker.
 */

/** Compact, model-facing view of a batch: counts (and verdict counts when it has checks), never results. */
export function compactBatch(b: BatchRow, checkCounts?: readonly CheckCount[]) {
  const p = toBatchProjection(b, undefined, checkCounts);
  const golden = p.golden_set && p.checks.find((c) => c.name === GOLDEN_CHECK_NAME);
  return {
    batch_id: p.id,
    status: p.status,
    subagent: p.subagent,
    total: p.total,
    succeeded: p.counts.succeeded,
    failed: p.counts.failed,
    cancelled: p.counts.cancelled,
    running: p.counts.running + p.counts.leased,
    waiting: p.counts.queued + p.counts.pending,
    progress: p.progress,
    usage: p.usage,
    cost_usd: p.cost_usd,
    ...(p.counts.awaiting_approval ? { awaiting_approval: p.counts.awaiting_approval } : {}),
    ...(p.checks.length ? { verdicts: p.verdicts } : {}),
    // A run against a golden set: how many finished answers agree with the set's (the check "golden").
    ...(p.golden_set && golden
      ? {
          golden: {
            golden_set: p.golden_set,
            passed: golden.passed,
            failed: golden.failed,
            pass_rate: golden.passed + golden.failed > 0 ? Math.round((golden.passed / (golden.passed + golden.failed)) * 1000) / 1000 : null,
          },
        }
      : {}),
    ...(p.pause_reason ? { pause_reason: p.pause_reason } : {}),
  };
}

/** compactBatch with each batch's per-check counts (the golden check's pass rate among them). */
async function compactBatches(db: DbOrTx, batches: BatchRow[]) {
  const counts = await loadCheckCounts(db, batches.map((b) => b.id));
  return batches.map((b) => compactBatch(b, counts.get(b.id)));
}

const NO_RESUBMIT =
  "The items now run durably in background workers. Do NOT submit these items again as task or agent_swarm calls, " +
  "and do not submit this batch again. Their results are not returned into this conversation: the user reads them " +
  "in the batch panel or downloads results.jsonl. Use batch_status for progress counts.";

async function workerAlive(db: Db, config: FlotillaConfig): Promise<boolean> {
  return (await countLiveWorkers(db, livenessWindowSeconds(config.subagent_batches.lease_seconds))) > 0;
}

async function threadHasBatches(db: Db, scope: { userId: string; threadId: string }): Promise<boolean> {
  const [row] = await db
    .select({ one: sql<number>`1` })
    .from(subagentBatches)
    .where(threadBatches(scope))
    .limit(1);
  return row !== undefined;
}

/**
 * The batch tools' facts for this owner's thread (owner-scoped, so it may run before the
 * thread's ownership is checked); null when batches are off or the database did not answer.
 * Never rejects: the chat route starts it beside the turn's own reads and writes
 * (server/chat/lead-run.ts), off the first token's path, and may never use it.
 */
export async function batchToolFacts(db: Db, config: FlotillaConfig, scope: { userId: string; threadId: string }): Promise<BatchToolFacts | null> {
  if (!config.subagent_batches.enabled || !config.subagents.enabled) return null;
  try {
    const [alive, history] = await Promise.all([workerAlive(db, config), threadHasBatches(db, scope)]);
    return { alive, history };
  } catch (err) {
    log.warn({ err }, "batch tools unavailable: the database did not answer");
    return null;
  }
}

/**
 * batch_task's arguments reach `execute` as the model sent them. The model reads the JSON Schema
 * of batchTaskInputSchema (its bounds as hints), but the AI SDK does not check them against it:
 * its refusal would read "Invalid input for tool batch_task: Type validation failed: …", where
 * every other door answers with the writer's words. The rules are applied in `submissionOf`.
 */
const batchTaskArguments = jsonSchema<unknown>(() => zodSchema(batchTaskInputSchema).jsonSchema, {
  validate: (value) => ({ success: true, value }),
});

/**
 * The tool's envelope: its arguments as the normalized submission (exactly one of items and
 * files, said in the model's words), checked in the JSON door's order: the top-level fields
 * (envelopeProblem), then the sub-agent, then the writer checks the rest. Every refusal names the
 * argument as the JSON door names the field (`items.3.item_key: ...`, `max_cost_usd: ...`).
 */
function submissionOf(input: unknown, submissionKey: string): BatchSubmission | { error: string } {
  if (input === null || typeof input !== "object" || Array.isArray(input)) return { error: "The arguments must be a JSON object." };
  const args = input as Record<string, unknown>;
  if ([args.items, args.files, args.golden_set].filter((v) => v !== undefined).length !== 1)
    return { error: "Pass exactly one of items, files (a glob) and golden_set." };
  if (args.files !== undefined && !(typeof args.prompt_template === "string" && args.prompt_template.includes(FILE_PLACEHOLDER)))
    return { error: `A batch over files needs a prompt_template containing ${FILE_PLACEHOLDER}.` };
  for (const field of ["model", "only"])
    if (args[field] !== undefined) return { error: `${field}: only a variant takes it (with variant_of: the batch it re-runs)` };
  const submission = { ...args, submission_key: submissionKey } as BatchSubmission;
  const problem = envelopeProblem(submission);
  return problem ? { error: submissionRefusal(problem).message } : submission;
}

const SUBMIT_UNAVAILABLE = "The batch could not be submitted because of a server error; nothing was submitted.";

/**
 * A variant's settings (with variant_of): the variant endpoint's body with this call's
 * submission key, parsed as that endpoint parses it, so the model reads the same refusals.
 */
function variantRequestOf(args: Record<string, unknown>, submissionKey: string): VariantRequest | { error: string } {
  const { variant_of: _original, ...settings } = args;
  if (settings.items !== undefined || settings.files !== undefined)
    return { error: "variant_of: a variant runs that batch's items again; pass no items or files." };
  const parsed = variantRequestSchema.safeParse({ ...settings, submission_key: submissionKey });
  return parsed.success ? parsed.data : { error: zodMessage(parsed.error) };
}

/**
 * The writer's arguments for this call (the estimate reads the same): its own submission, or
 * with variant_of a variant of one of this thread's batches, planned by the variant endpoint's
 * own planVariant (another owner's or thread's batch: not found). Throws the writer's refusals.
 */
async function callArgs(ctx: LeadToolContext, input: unknown, toolCallId: string): Promise<SubmitBatchArgs | { error: string }> {
  const submissionKey = `${ctx.runId}:${toolCallId}`;
  const origin = { kind: "tool", runId: ctx.runId, toolCallId } as const;
  const args = input !== null && typeof input === "object" && !Array.isArray(input) ? (input as Record<string, unknown>) : undefined;
  if (args?.variant_of === undefined) {
    const submission = submissionOf(input, submissionKey);
    if ("error" in submission) return submission;
    const subagent = batchSubagent(ctx.config, submission.subagent, submission.model);
    return { userId: ctx.userId, threadId: ctx.threadId, input: submission, config: ctx.config, ...subagent, model: ctx.model, origin };
  }
  if (typeof args.variant_of !== "string") return { error: "variant_of: must be the id of a batch of this thread" };
  const request = variantRequestOf(args, submissionKey);
  if ("error" in request) return request;
  const variant = await planVariant(ctx.db, {
    userId: ctx.userId,
    threadId: ctx.threadId,
    batchId: args.variant_of,
    request,
    config: ctx.config,
    resolveSubagent: (name) => batchSubagent(ctx.config, name),
    origin,
  });
  return { ...variant, model: ctx.model };
}

/** No surprise bills: an estimate over subagent_batches.confirm_over_usd (0: any; null: never) waits for the person. */
function needsConfirmation(ctx: LeadToolContext, estimate: BatchEstimate, submission: BatchSubmission): boolean {
  const over = ctx.config.subagent_batches.confirm_over_usd;
  if (over === null) return false;
  return over === 0 || laneCostUsd(estimate, (submission as { lane?: string }).lane) > over;
}

/**
 * The AI SDK's needsApproval for batch_task: the submission's estimate, over the threshold, ends
 * the response on an approval card showing it (the estimate goes into the call's row). A call
 * the writer would refuse does not ask: its execute answers the refusal.
 */
async function asksPerson(ctx: LeadToolContext, input: unknown, toolCallId: string): Promise<boolean> {
  try {
    const args = await callArgs(ctx, input, toolCallId);
    if ("error" in args) return false;
    const estimate = await estimateBatch(ctx.db, args);
    if (!needsConfirmation(ctx, estimate, args.input)) return false;
    ctx.approvalDetails?.set(toolCallId, estimate);
    return true;
  } catch (err) {
    if (!(err instanceof AppError)) log.warn({ err, run_id: ctx.runId }, "batch_task estimate failed; execute answers");
    return false;
  }
}

/** What the tool result says the person chose on the card. */
const CHOSEN = {
  run: "The person saw the estimate and chose Run: every item runs.",
  pilot:
    `The person saw the estimate and chose "Run a pilot of ${CARD_PILOT_ITEMS}": only the first ${CARD_PILOT_ITEMS} items run, ` +
    "then the batch pauses (pause_reason pilot) until the person resumes it in the batch panel, which runs the rest.",
};

export function createBatchTaskTool(ctx: LeadToolContext) {
  const b = ctx.config.subagent_batches;
  return tool({
    description:
      `Durable batch: run the same kind of work over many independent items (dozens to ${b.max_items_per_batch}) in ` +
      "background workers that survive restarts. Returns a receipt immediately; results are NOT returned to you. " +
      "Use it when the user asks to process a list, file or collection item by item and wants the results as a " +
      "dataset (for the thread's uploaded files, pass files: a glob, with {{file}} in prompt_template); " +
      "use task or agent_swarm when you need the answers yourself to continue. " +
      "To run a batch's items again with a changed prompt_template, model, sub-agent, output_schema or checks (all of them, " +
      "or only: {verdict: \"failed\"}), pass variant_of: its batch_id and only what changes, no items; then compare_batches " +
      "tells what got better or worse. " +
      "To grade a run against what people decided, pass golden_set: {id, version?} instead of items: the set's items run, " +
      "and the check golden (the answer equals the set's expected) gives the pass rate batch_status reports. " +
      "The receipt carries the batch's cost estimate; a batch estimated over the configured amount waits for the user's approval first. " +
      `Limits: at most ${b.max_items_per_batch} items, max_live_items up to ${b.max_live_items_per_batch} ` +
      `(default ${b.default_max_live_items}), max_running_items up to ${b.max_running_items_per_batch} ` +
      `(default ${b.default_max_running_items}). Sub-agents:\n${describeSubagents(ctx.config)}`,
    inputSchema: batchTaskArguments,
    needsApproval: (input, { toolCallId }) => asksPerson(ctx, input, toolCallId),
    execute: refusing(ctx, "batch_task", SUBMIT_UNAVAILABLE, async (input, { toolCallId }) => {
      if (!(await workerAlive(ctx.db, ctx.config)))
        return {
          error:
            "No batch worker is running, so a batch would never start. Tell the user to start one (npm run worker) " +
            "or do the work with task / agent_swarm instead.",
        };
      const args = await callArgs(ctx, input, toolCallId);
      if ("error" in args) return args;
      const estimate = await estimateBatch(ctx.db, args);
      let chosen: keyof typeof CHOSEN | undefined;
      if (needsConfirmation(ctx, estimate, args.input)) {
        // Over the threshold it runs only as a person approved it, with the arguments they saw.
        const { option } = await approvedLeadCall(ctx.db, { threadId: ctx.threadId, toolCallId, input });
        chosen = option === "pilot" ? "pilot" : "run";
      }
      const toSubmit = chosen === "pilot" ? { ...args, input: { ...args.input, pilot: CARD_PILOT_ITEMS } } : args;
      const { batch, created } = await submitBatch(ctx.db, toSubmit);
      return {
        ...compactBatch(batch),
        ...(batch.variantOf ? { variant_of: batch.variantOf } : {}),
        created,
        max_live_items: batch.maxLiveItems,
        max_running_items: batch.maxRunningItems,
        estimate,
        ...(batch.pilot !== null ? { pilot: batch.pilot } : {}),
        ...(chosen ? { person_chose: CHOSEN[chosen] } : {}),
        message: `Batch ${batch.id} ${created ? "accepted" : "was already submitted"} with ${batch.total} items. ${NO_RESUBMIT}`,
      };
    }),
  });
}

export function createBatchStatusTool(ctx: LeadToolContext) {
  return tool({
    description:
      "Progress of durable batches in this thread: status and counts (succeeded, failed, running, waiting). " +
      "Never returns item results. Pass batch_id for one batch, or nothing for the most recent ones.",
    inputSchema: batchStatusInputSchema,
    execute: refusing(ctx, "batch_status", "Batch status is unavailable right now.", async ({ batch_id }) => {
      if (batch_id) {
        const batch = await getBatch(ctx.db, { userId: ctx.userId, threadId: ctx.threadId, batchId: batch_id });
        return { batches: await compactBatches(ctx.db, [batch]) };
      }
      const batches = await listBatches(ctx.db, { userId: ctx.userId, threadId: ctx.threadId, limit: 10 });
      return { batches: await compactBatches(ctx.db, batches) };
    }),
  });
}

/**
 * One bounded page of a batch's item results for synthesis: per item its typed `output` (null
 * when it does not fit; then `result`, the preview, cut), its `verdict`, its checks (the failed
 * ones with their reasons, cut) and its error. Only batches of this thread and owner: any other id is "batch not
 * found". The page's text is cut so that it stays within tools.max_output_chars however long the
 * results are.
 */
export function createBatchResultsTool(ctx: LeadToolContext) {
  return tool({
    description:
      "Read the results of a batch of this thread, one bounded page at a time: per item its item_key, status, " +
      "output (the typed answer, when the batch has an output_schema) or result preview, verdict and checks " +
      "(when the batch has checks; a failed check says why), and error. Use status or verdict (e.g. verdict: failed) to read only some items; " +
      "pass next_cursor to read further. Read only what you need.",
    inputSchema: batchResultsInputSchema,
    execute: refusing(ctx, "batch_results", "Batch results are unavailable right now.", async ({ batch_id, status, verdict, cursor, limit }) => {
      const pageLimit = limit ?? BATCH_RESULTS_DEFAULT_LIMIT;
      const page = await listItems(ctx.db, {
        userId: ctx.userId,
        threadId: ctx.threadId,
        batchId: batch_id,
        status,
        verdict,
        cursor: cursor ?? null,
        limit: pageLimit,
        previewMaxChars: ctx.config.subagent_batches.result_preview_max_chars,
      });
      const perItem = Math.max(200, Math.floor(ctx.config.tools.max_output_chars / pageLimit) - 200);
      const cut = (text: string | null, max = perItem) => (text && text.length > max ? `${text.slice(0, max)}…` : text);
      return {
        batch_id,
        items: page.items.map((i) => {
          const output = i.output != null && JSON.stringify(i.output).length <= perItem ? i.output : null;
          const failedChecks = (i.checks ?? []).filter((c) => !c.passed);
          // The failed checks' reasons share half an item's room.
          const reasonMax = Math.max(40, Math.floor(perItem / 2 / Math.max(1, failedChecks.length)));
          return {
            item_key: i.itemKey,
            position: i.position,
            status: i.status,
            attempts: i.attempts,
            output,
            ...(output === null ? { result: cut(i.preview) } : {}),
            verdict: i.verdict,
            // Reasons only for failed checks: a passing one's reason tells the lead nothing new.
            checks: (i.checks ?? []).map((c) => ({
              name: c.name,
              passed: c.passed,
              ...(c.score !== undefined ? { score: c.score } : {}),
              ...(!c.passed && c.reason ? { reason: cut(c.reason, reasonMax) } : {}),
            })),
            error: cut(i.error),
          };
        }),
        next_cursor: page.nextCursor,
      };
    }),
  });
}

/**
 * The batch tools this response may offer: none when batches are disabled or the database
 * does not answer; batch_task only while a worker is alive; batch_status as well when the
 * thread already has batches, batch_results and compare_batches only then.
 */
export async function createBatchTools(ctx: LeadToolContext): Promise<ToolSet> {
  const facts = await (ctx.batchFacts ?? batchToolFacts(ctx.db, ctx.config, ctx));
  if (!facts) return {};
  const { alive, history } = facts;
  return {
    ...(alive ? { batch_task: createBatchTaskTool(ctx) } : {}),
    ...(alive || history ? { batch_status: createBatchStatusTool(ctx) } : {}),
    ...(history ? { batch_results: createBatchResultsTool(ctx), compare_batches: createCompareBatchesTool(ctx) } : {}),
  };
}
