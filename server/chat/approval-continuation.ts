import { and, eq, sql } from "drizzle-orm";
import type { ChatMessage } from "@/lib/api/chat";
import type { FlotillaConfig } from "@/lib/config";
import { claimContinuation, expireChatApprovals, openLeadApprovals, threadsToContinue } from "@/server/agent/chat-approvals";
import { deniedText } from "@/server/batches/approvals";
import type { Db, DbOrTx } from "@/server/db/client";
import { messages, subagentBatches, threads } from "@/server/db/schema";
import { log } from "@/server/log";
import type { ResolvedModel } from "@/server/models/types";
import { runLocked, type StartedLeadRun, sweepThreads, tryLockThread } from "./lead-run";
import { loadMessages, saveMessage } from "./messages";

/**
 * The lead's side of approvals in the chat: its response ended on the AI SDK's approval
 * requests (rows in tool_approvals, server/agent/chat-approvals.ts), and the thread waits for
 * the person (tryLockThread refuses every other response). Once every call of that response is
 * decided, one continuation goes on in the same reply: its transaction takes the thread and
 * marks the rows continued (`claimContinuation`), so whichever process or tab gets there, it
 * starts once; the stored reply's parts take the decisions (approved: the AI SDK runs the call
 * first; denied: the model reads "denied by the user: <reason>"). The decision's request starts
 * it; a web process's sweep starts those a restart or a busy moment left behind, and denies
 * calls past tools.approval_timeout_seconds.
 */

interface Lead {
  config: FlotillaConfig;
  model: ResolvedModel;
}

type Part = Record<string, unknown> & { toolCallId?: string; state?: string };

/**
 * Starts the continuation of the thread's lead reply whose calls are all decided. Null when a
 * call still waits, nothing is due, or someone else holds the thread (the sweep tries again).
 */
export async function continueDecidedReply(db: Db, input: Lead & { threadId: string }): Promise<StartedLeadRun | null> {
  const { threadId } = input;
  const open = await openLeadApprovals(db, threadId);
  if (open.length === 0 || open.some((r) => r.status === "pending")) return null;
  const runId = open[0]!.runId;
  const rows = open.filter((r) => r.runId === runId);
  const [owner] = await db.select({ userId: threads.userId }).from(threads).where(eq(threads.id, threadId));
  if (!owner) return null;
  // The reply that asked: the assistant message holding the calls' parts.
  const [asking] = await repliesHolding(db, threadId, { toolCallId: rows[0]!.toolCallId }).limit(1);
  if (!asking) {
    // The reply is gone: nothing to go on with; the decisions are marked carried so the thread is free.
    await claimContinuation(db, { threadId, runId });
    log.warn({ thread_id: threadId, run_id: runId }, "the reply that asked for approval is gone; nothing continues");
    return null;
  }
  const taken = await db.transaction(async (tx) => {
    const streamId = await tryLockThread(tx, { threadId, userId: owner.userId, messageId: asking.id, continuation: true });
    if (!streamId) return null;
    // Someone else carried these decisions: the rollback gives the lock back.
    if ((await claimContinuation(tx, { threadId, runId })) === 0) throw new NotDue();
    const byCall = new Map(rows.map((r) => [r.toolCallId, r]));
    const parts = (asking.parts as Part[]).map((p) => {
      const row = p.toolCallId ? byCall.get(p.toolCallId) : undefined;
      if (!row || p.state !== "approval-requested") return p;
      const approval = { ...(p.approval as object), id: (p.approval as { id?: string })?.id ?? row.approvalId };
      return row.status === "approved"
        ? { ...p, state: "approval-responded", approval: { ...approval, approved: true } }
        : { ...p, state: "output-denied", approval: { ...approval, approved: false, reason: deniedText(row.reason) } };
    });
    const message = { id: asking.id, role: "assistant", parts, metadata: asking.metadata } as unknown as ChatMessage;
    await saveMessage(tx, { threadId, message });
    return { streamId, asking: message };
  }).catch((err) => {
    if (err instanceof NotDue) return null;
    throw err;
  });
  if (!taken) return null;
  const history = await loadMessages(db, { threadId });
  // Up to the reply that asked: it is the conversation's last turn, and goes on.
  const end = history.findIndex((m) => m.id === asking.id);
  return runLocked(db, {
    ...input,
    userId: owner.userId,
    history: history.slice(0, end + 1),
    trigger: { kind: "continue" },
    streamId: taken.streamId,
    messageId: asking.id,
    // A person's decision (or its timeout) carried to the model: the reply they were shown goes on
    // (a notice stored instead would replace it).
    unattended: false,
  });
}

class NotDue extends Error {}

/** Threads one sweep looks at, at most. */
const SWEEP_LIMIT = 100;

/**
 * The web process's approvals sweep: denies chat calls past their time (and a child's whose run
 * ended), then starts every due continuation (decided while the thread was busy, or left by a
 * process that died). Returns how many continuations it started.
 */
export async function sweepChatApprovals(db: Db, lead: Lead): Promise<number> {
  await expireChatApprovals(db, lead.config.tools.approval_timeout_seconds);
  const threadIds = await threadsToContinue(db, SWEEP_LIMIT);
  return sweepThreads(threadIds, (threadId) => continueDecidedReply(db, { ...lead, threadId }), "could not continue a reply after its approvals");
}

/** What an approved call's card says when the reply that was to run it died first. */
const NOT_CARRIED_OUT =
  "Not carried out: the server stopped before this approved call finished, so its result is unknown and nothing continues it. Ask again to run it.";
const BATCH_NOT_SUBMITTED = "Not carried out: the server stopped before this approved batch was submitted; nothing was submitted. Ask again to run it.";

/**
 * Restart recovery, for the threads of the lead runs it interrupted: an approved call whose
 * continuation died stays `approval-responded` in the stored reply (its batch card would say
 * "Submitting batch…" for ever, and its decision is already carried, so nothing runs it). Each
 * such call is settled in the reply: a batch_task whose batch exists (its submission key ends in
 * the call's id) shows that batch; any other call shows as not carried out. Returns how many.
 */
export async function settleDeadContinuations(db: DbOrTx, threadIds: readonly string[]): Promise<number> {
  let settled = 0;
  for (const threadId of new Set(threadIds)) {
    const replies = await repliesHolding(db, threadId, { state: "approval-responded" });
    for (const reply of replies) {
      const parts: Part[] = [];
      for (const p of reply.parts as Part[]) {
        if (p.state !== "approval-responded" || !p.toolCallId) {
          parts.push(p);
          continue;
        }
        const [batch] =
          p.type === "tool-batch_task"
            ? await db
                .select({ id: subagentBatches.id, total: subagentBatches.total })
                .from(subagentBatches)
                .where(and(eq(subagentBatches.threadId, threadId), sql`${subagentBatches.submissionKey} like ${`%:${p.toolCallId}`}`))
                .limit(1)
            : [];
        parts.push(
          batch
            ? {
                ...p,
                state: "output-available",
                output: { batch_id: batch.id, total: batch.total, message: `Batch ${batch.id} was submitted before the server stopped.` },
              }
            : { ...p, state: "output-error", errorText: p.type === "tool-batch_task" ? BATCH_NOT_SUBMITTED : NOT_CARRIED_OUT },
        );
        settled++;
      }
      const message = { id: reply.id, role: "assistant", parts, metadata: reply.metadata } as unknown as ChatMessage;
      await saveMessage(db, { threadId, message });
    }
  }
  return settled;
}

/** The thread's assistant replies with a part that holds `part`'s fields (jsonb containment). */
function repliesHolding(db: DbOrTx, threadId: string, part: Record<string, string>) {
  return db
    .select({ id: messages.id, parts: messages.parts, metadata: messages.metadata })
    .from(messages)
    .where(and(eq(messages.threadId, threadId), eq(messages.role, "assistant"), sql`${messages.parts} @> ${JSON.stringify([part])}::jsonb`));
}
