import { and, asc, eq, sql } from "drizzle-orm";
import type { ModelMessage } from "ai";
import { type DbOrTx, driverOf } from "@/server/db/client";
import { storableText } from "@/server/db/storable";
import { agentRuns, subagentBatches, subagentBatchItems, toolApprovals } from "@/server/db/schema";
import { AppError, notFound } from "@/server/errors";
import { BATCH_CHANNEL, batchEventPayload } from "./notify";
import { type BatchScopeArgs, checkIds, getBatch, lockBatch } from "./owned";
import { itemSummaryColumns } from "./repository";
import type { BatchRow, ItemSummary } from "./types";

/**
 * Batch items whose tool call waits for a person (DESIGN "Approvals"). The settle parks the item
 * in awaiting_approval with one tool_approvals row per call (settle.sql); the owner decides per
 * item or per tool (approvals.sql re-queues an item once none of its calls is pending); the next
 * attempt resumes from the parked attempt's stored transcript plus the decisions (`approvedResume`),
 * so the approved call runs and a denied one reaches the model as a tool error.
 */

export type ApprovalDecision = "approve" | "deny";

const STATUS_OF: Record<ApprovalDecision, "approved" | "denied"> = { approve: "approved", deny: "denied" };

/** What the model reads for a denied call. */
export function deniedText(reason: string | null | undefined): string {
  return `denied by the user: ${reason?.trim() || "no reason given"}`;
}

async function wake(tx: DbOrTx, batchId: string): Promise<void> {
  await tx.execute(sql`select pg_notify(${BATCH_CHANNEL}, ${batchEventPayload("retry", batchId)})`);
}

/** A person's reason and tool name can hold any character: written storable (storable.ts). */
async function decide(
  tx: DbOrTx,
  args: { userId: string; batchId: string; itemId: string | null; tool: string | null; decision: ApprovalDecision; reason?: string },
): Promise<{ decided: number; requeued: number }> {
  const [row] = await driverOf(tx)<{ decided: number; requeued: number }[]>`
    select * from flotilla_decide_approvals(${args.userId}::uuid, ${args.batchId}::uuid, ${args.itemId}::uuid,
      ${storableText(args.tool) ?? null}, ${STATUS_OF[args.decision]}, ${storableText(args.reason) ?? null})`;
  if (row && row.requeued > 0) await wake(tx, args.batchId);
  return row ?? { decided: 0, requeued: 0 };
}

/**
 * POST .../items/{item_id}/approval: the owner's decision on every pending call of one waiting
 * item. 404 for an item not in this owner's batch; 409 when the item is not waiting.
 */
export async function decideItemApproval(
  db: DbOrTx,
  args: BatchScopeArgs & { itemId: string; decision: ApprovalDecision; reason?: string; previewMaxChars?: number },
): Promise<{ batch: BatchRow; item: ItemSummary }> {
  checkIds(args);
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    const i = subagentBatchItems;
    const [item] = await tx
      .select({ status: i.status })
      .from(i)
      .where(and(eq(i.id, args.itemId), eq(i.batchId, batch.id)));
    if (!item) throw notFound("item");
    if (item.status !== "awaiting_approval")
      throw new AppError("conflict", `item: is ${item.status}, not waiting for approval`);
    await decide(tx, { userId: args.userId, batchId: batch.id, itemId: args.itemId, tool: null, decision: args.decision, reason: args.reason });
    const [row] = await tx.select(itemSummaryColumns(args.previewMaxChars)).from(i).where(eq(i.id, args.itemId));
    const [fresh] = await tx.select().from(subagentBatches).where(eq(subagentBatches.id, batch.id));
    return {
      batch: fresh ?? batch,
      item: { ...row!, inputTokens: Number(row!.inputTokens), outputTokens: Number(row!.outputTokens) } as ItemSummary,
    };
  });
}

/** The calls of a batch that wait for a person: pending, their item still parked (the ones approvals.sql decides). */
const waitingCalls = (batchId: string) =>
  and(eq(toolApprovals.batchId, batchId), eq(toolApprovals.status, "pending"), eq(subagentBatchItems.status, "awaiting_approval"));

/** How many calls of each tool wait in this batch (every one of them), by tool name. */
async function countWaiting(db: DbOrTx, batchId: string, tool?: string): Promise<{ tool: string; waiting: number }[]> {
  return db
    .select({ tool: toolApprovals.toolName, waiting: sql<number>`count(*)::int` })
    .from(toolApprovals)
    .innerJoin(subagentBatchItems, eq(subagentBatchItems.id, toolApprovals.itemId))
    .where(and(waitingCalls(batchId), tool === undefined ? undefined : eq(toolApprovals.toolName, tool)))
    .groupBy(toolApprovals.toolName)
    .orderBy(asc(toolApprovals.toolName));
}

/**
 * POST .../subagent-batches/{id}/approvals: one decision for every waiting call of `tool` in the
 * batch, taken only if exactly `seen` of them wait (the number the person was shown); otherwise
 * nothing is decided and the answer says how many wait now. The count and the decision run under
 * the batch's row lock, which every transition that parks, decides, expires or cancels a call of
 * the batch takes first (sql/README.md, lock order): no call can start or stop waiting between them.
 */
export async function decideBatchApprovals(
  db: DbOrTx,
  args: BatchScopeArgs & { tool: string; decision: ApprovalDecision; reason?: string; seen: number },
): Promise<{ decided: number } | { waiting: number; message: string }> {
  checkIds(args);
  // A person's tool name may hold any character (NUL in a query parameter is refused).
  const tool = storableText(args.tool);
  return db.transaction(async (tx) => {
    const batch = await lockBatch(tx, args);
    const waiting = (await countWaiting(tx, batch.id, tool))[0]?.waiting ?? 0;
    if (waiting !== args.seen)
      return {
        waiting,
        message: `seen: ${args.seen} waiting ${args.seen === 1 ? "call" : "calls"} of ${args.tool} were shown, but ${waiting} wait now; nothing was decided`,
      };
    const { decided } = await decide(tx, { userId: args.userId, batchId: batch.id, itemId: null, tool, decision: args.decision, reason: args.reason });
    return { decided };
  });
}

/** The timeout sweep (every worker poll): calls waiting longer than the limit are denied. Returns the items re-queued. */
export async function expireApprovals(db: DbOrTx, timeoutSeconds: number): Promise<number> {
  const [row] = await driverOf(db)<{ n: number }[]>`select flotilla_expire_approvals(${timeoutSeconds}::float8) as n`;
  return row?.n ?? 0;
}

/** Characters of a waiting call's arguments the panel shows. */
const INPUT_PREVIEW_CHARS = 500;

/**
 * The calls of this owner's batch that wait for a person, in item order (the panel's list, at
 * most `limit`), and how many wait per tool (all of them).
 */
export async function listWaitingApprovals(db: DbOrTx, args: BatchScopeArgs & { limit?: number }) {
  checkIds(args);
  const batch = await getBatch(db, args);
  const tools = await countWaiting(db, batch.id);
  const a = toolApprovals;
  const i = subagentBatchItems;
  const rows = await db
    .select({
      itemId: a.itemId,
      itemKey: i.itemKey,
      tool: a.toolName,
      input: sql<string>`left(coalesce(${a.input}::text, ''), ${INPUT_PREVIEW_CHARS})`,
      createdAt: a.createdAt,
    })
    .from(a)
    .innerJoin(i, eq(i.id, a.itemId))
    .where(waitingCalls(batch.id))
    .orderBy(asc(i.position), asc(a.createdAt))
    .limit(args.limit ?? 100);
  const approvals = rows.map((r) => ({
    item_id: r.itemId!,
    item_key: r.itemKey,
    tool: r.tool,
    input: r.input,
    created_at: r.createdAt.toISOString(),
  }));
  return { approvals, tools };
}

/**
 * The decisions on the calls the item's last attempt parked on, as the tool message the next
 * attempt continues with: approved calls as the AI SDK's approval responses (generateText runs
 * them first), denied ones as tool errors the model reads. The run continues after its durable
 * steps (steps.ts: the parked step is stored like any step another follows), or, without them,
 * after `replay`: the parked run's stored transcript. Undefined when the item's latest run did not
 * park or a call is still pending.
 */
export async function approvalDecisions(
  db: DbOrTx,
  item: { id: string },
): Promise<{ message: ModelMessage; runId: string; replay?: ModelMessage[] } | undefined> {
  const a = toolApprovals;
  const rows = await db
    .select({
      runId: a.runId,
      approvalId: a.approvalId,
      toolCallId: a.toolCallId,
      toolName: a.toolName,
      status: a.status,
      reason: a.reason,
      transcript: agentRuns.transcript,
    })
    .from(subagentBatchItems)
    .innerJoin(a, and(eq(a.itemId, subagentBatchItems.id), eq(a.runId, subagentBatchItems.runId)))
    .leftJoin(agentRuns, eq(agentRuns.id, a.runId))
    .where(eq(subagentBatchItems.id, item.id))
    .orderBy(asc(a.createdAt));
  if (rows.length === 0 || rows.some((r) => r.status === "pending")) return undefined;
  const content = rows.map((r) =>
    r.status === "approved"
      ? ({ type: "tool-approval-response", approvalId: r.approvalId, approved: true } as const)
      : ({
          type: "tool-result",
          toolCallId: r.toolCallId,
          toolName: r.toolName,
          output: { type: "error-text", value: deniedText(r.reason) },
        } as const),
  );
  const message: ModelMessage = { role: "tool", content };
  const transcript = rows[0]!.transcript;
  const replay = Array.isArray(transcript) && transcript.length > 0 ? [...(transcript as ModelMessage[]), message] : undefined;
  return { message, runId: rows[0]!.runId, ...(replay ? { replay } : {}) };
}
