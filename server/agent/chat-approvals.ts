import { createHash } from "node:crypto";
import { and, asc, eq, inArray, or, sql } from "drizzle-orm";
import type { ChatApproval, DecidedChatApproval } from "@/lib/api/approvals";
import { type ApprovalDecision, deniedText } from "@/server/batches/approvals";
import { type Db, type DbOrTx, driverOf } from "@/server/db/client";
import { storable, storableText } from "@/server/db/storable";
import { agentRuns, toolApprovals } from "@/server/db/schema";
import { AppError, notFound } from "@/server/errors";
import { log } from "@/server/log";

/**
 * Approvals in the chat (DESIGN "Working alongside the agents", "Approvals"): a call that
 * tools.require_approval matches, made by the lead or by a `task` / swarm child, waits for a
 * person in a `tool_approvals` row bound to its run, its tool call id and the sha256 of its
 * arguments. The lead's response ends with the AI SDK's approval request and its row
 * (`recordLeadApprovals`); the decision starts a continuation (server/chat/approval-continuation.ts).
 * A child cannot end a response, so its call waits here (`waitForDecision`) without its
 * capacity slot. A decision is one conditional UPDATE (`decideChatApproval`): exactly once,
 * whichever process or tab sends it; the browser names only the approval and the decision, and
 * a call runs only with the arguments whose hash was approved (`approvedCall`).
 */

/** Notifications `decided:<approval id>` wake a child waiting on that row (polling still finds it). */
export const APPROVAL_CHANNEL = "flotilla_chat_approvals";
/** How often a waiting child looks at its row without a notification. */
const POLL_MS = 1_000;

/** The sha256 (hex) of a value's canonical JSON: object keys sorted, so the same arguments hash the same. */
export function inputHash(input: unknown): string {
  return createHash("sha256").update(canonicalJson(input)).digest("hex");
}

function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const entries = Object.keys(value)
    .sort()
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
  return `{${entries.join(",")}}`;
}

const expiresIn = (timeoutSeconds: number) => sql`now() + make_interval(secs => ${timeoutSeconds}::float8)`;

/** One call the model asked for that waits for a person (the AI SDK's tool-approval-request). */
export interface ApprovalRequest {
  approvalId: string;
  toolCallId: string;
  toolName: string;
  input: unknown;
}

/** The approval requests among a model step's (or a generateText call's) content. */
export function approvalRequestsOf(content: readonly { type: string }[]): ApprovalRequest[] {
  const out: ApprovalRequest[] = [];
  for (const part of content) {
    if (part.type !== "tool-approval-request") continue;
    const p = part as unknown as { approvalId: string; toolCall: { toolCallId: string; toolName: string; input: unknown } };
    out.push({ approvalId: p.approvalId, toolCallId: p.toolCall.toolCallId, toolName: p.toolCall.toolName, input: p.toolCall.input });
  }
  return out;
}

/**
 * The rows of the calls a lead response ended on, written before the response releases its
 * thread (so the thread counts as waiting from then on). Writing them twice writes nothing.
 */
export async function recordLeadApprovals(
  db: DbOrTx,
  args: {
    userId: string;
    threadId: string;
    runId: string;
    requests: readonly ApprovalRequest[];
    timeoutSeconds: number;
    /** What the card shows beside the arguments, by tool call id (a batch_task's estimate). */
    details?: ReadonlyMap<string, unknown>;
  },
): Promise<void> {
  if (args.requests.length === 0) return;
  await db
    .insert(toolApprovals)
    .values(
      args.requests.map((r) => ({
        userId: args.userId,
        threadId: args.threadId,
        kind: "lead" as const,
        runId: args.runId,
        approvalId: r.approvalId,
        toolCallId: r.toolCallId,
        toolName: r.toolName,
        // Stored storable (U+FFFD for NUL and lone surrogates); the hash is of the call's own arguments.
        input: storable(r.input ?? null),
        inputHash: inputHash(r.input),
        detail: args.details?.get(r.toolCallId) ?? null,
        expiresAt: expiresIn(args.timeoutSeconds),
      })),
    )
    .onConflictDoNothing();
}

/** A child's waiting call: its row's id and when it is denied for want of a decision. */
export interface ChildApproval {
  id: string;
  expiresAt: Date;
}

/** Writes the row of a child's call that waits for a person. */
export async function createChildApproval(
  db: DbOrTx,
  args: { userId: string; threadId: string; runId: string; toolCallId: string; toolName: string; input: unknown; timeoutSeconds: number },
): Promise<ChildApproval> {
  const [row] = await db
    .insert(toolApprovals)
    .values({
      userId: args.userId,
      threadId: args.threadId,
      kind: "child",
      runId: args.runId,
      approvalId: args.toolCallId,
      toolCallId: args.toolCallId,
      toolName: args.toolName,
      input: storable(args.input ?? null),
      inputHash: inputHash(args.input),
      expiresAt: expiresIn(args.timeoutSeconds),
    })
    .returning({ id: toolApprovals.id, expiresAt: toolApprovals.expiresAt });
  return { id: row!.id, expiresAt: row!.expiresAt! };
}

/**
 * A row that still waits for a person: pending, and (a child's) its run still active. A lead's
 * run has ended by design (its response ended on the request); a child's run that ended (Stop,
 * its process died) can no longer take a decision.
 */
const stillWaits = sql`${toolApprovals.status} = 'pending' and (${toolApprovals.kind} = 'lead' or exists (
  select 1 from ${agentRuns} r where r.id = ${toolApprovals.runId} and r.status in ('pending', 'running')))`;

/** GET /api/threads/{id}/approvals: the calls waiting in this owner's thread, oldest first. */
export async function listThreadApprovals(db: DbOrTx, args: { userId: string; threadId: string }): Promise<ChatApproval[]> {
  const a = toolApprovals;
  const rows = await db
    .select()
    .from(a)
    .where(and(eq(a.threadId, args.threadId), eq(a.userId, args.userId), inArray(a.kind, ["lead", "child"]), stillWaits))
    .orderBy(asc(a.createdAt), asc(a.id))
    .limit(200);
  return rows.map((r) => ({
    id: r.id,
    run_id: r.runId,
    kind: r.kind as "lead" | "child",
    tool_call_id: r.toolCallId,
    tool: r.toolName,
    input: r.input,
    ...(r.detail ? { estimate: r.detail as ChatApproval["estimate"] } : {}),
    created_at: r.createdAt.toISOString(),
    expires_at: (r.expiresAt ?? r.createdAt).toISOString(),
  }));
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** What a decided row looks like on the wire. */
function decided(r: typeof toolApprovals.$inferSelect): DecidedChatApproval {
  return {
    id: r.id,
    run_id: r.runId,
    tool: r.toolName,
    status: r.status as "approved" | "denied",
    reason: r.reason,
    option: r.option,
    decided_at: (r.decidedAt ?? new Date()).toISOString(),
  };
}

/**
 * POST /api/threads/{id}/approvals/{approval_id}: one conditional UPDATE takes the decision, so
 * of two at once exactly one wins; the other (and any later one) is 409. 404 for a row that is
 * not this owner's in this thread. The row's arguments and hash are never written here.
 */
export async function decideChatApproval(
  db: DbOrTx,
  args: { userId: string; threadId: string; approvalId: string; decision: ApprovalDecision; reason?: string; option?: "pilot" },
): Promise<{ approval: DecidedChatApproval; kind: "lead" | "child" }> {
  if (!UUID.test(args.approvalId)) throw notFound("approval");
  const a = toolApprovals;
  const mine = and(eq(a.id, args.approvalId), eq(a.threadId, args.threadId), eq(a.userId, args.userId), inArray(a.kind, ["lead", "child"]));
  if (args.option) {
    // Only a card that offers the choice takes it: a lead's batch_task waiting on its estimate.
    const [row] = await db.select({ kind: a.kind, detail: a.detail }).from(a).where(mine);
    if (!row) throw notFound("approval");
    if (row.kind !== "lead" || row.detail === null)
      throw new AppError("validation_failed", "option: only a batch_task waiting on its estimate offers a pilot");
  }
  const [row] = await db
    .update(a)
    .set({
      status: args.decision === "approve" ? "approved" : "denied",
      reason: args.decision === "deny" ? storableText(args.reason?.trim()) || null : null,
      option: args.option ?? null,
      decidedAt: sql`now()`,
    })
    .where(and(mine, stillWaits))
    .returning();
  if (row) {
    await notifyDecided(db, row.id);
    return { approval: decided(row), kind: row.kind as "lead" | "child" };
  }
  const [seen] = await db.select({ status: a.status }).from(a).where(mine);
  if (!seen) throw notFound("approval");
  throw new AppError(
    "conflict",
    seen.status === "pending" ? "approval: the run that asked has ended; it no longer waits" : `approval: already ${seen.status}`,
  );
}

async function notifyDecided(db: DbOrTx, id: string): Promise<void> {
  await db.execute(sql`select pg_notify(${APPROVAL_CHANNEL}, ${`decided:${id}`})`);
}

/** Why a call that waited too long was denied (the model reads it after "denied by the user: "). */
const timeoutReason = (seconds: number) => `no decision within ${seconds} s (tools.approval_timeout_seconds)`;

/**
 * The sweep of every web process: chat calls past their expiry are denied, and a child's call
 * whose run ended (Stop, a dead process) stops waiting. Returns the threads with a lead call
 * denied (their continuation is due).
 */
export async function expireChatApprovals(db: DbOrTx, timeoutSeconds: number): Promise<string[]> {
  const rows = await db.execute<{ thread_id: string; kind: string }>(sql`
    update ${toolApprovals} a
       set status = 'denied', decided_at = now(),
           reason = case when a.expires_at <= now() then ${timeoutReason(timeoutSeconds)} else 'the run ended before a decision' end
     where a.status = 'pending' and a.kind in ('lead', 'child')
       and (a.expires_at <= now()
            or (a.kind = 'child' and not exists (
                  select 1 from ${agentRuns} r where r.id = a.run_id and r.status in ('pending', 'running'))))
    returning a.id, a.thread_id, a.kind`);
  return [...new Set(rows.filter((r) => r.kind === "lead").map((r) => r.thread_id))];
}

/** A decision as the waiting call reads it. */
export interface Decision {
  status: "approved" | "denied";
  reason: string | null;
  inputHash: string | null;
}

/**
 * The row's decision, or undefined while it waits. A row past its expiry is denied first (the
 * expiry is the row's, so it holds whichever process waits on it).
 */
async function readDecision(db: DbOrTx, id: string, timeoutSeconds: number): Promise<Decision | undefined> {
  await db
    .update(toolApprovals)
    .set({ status: "denied", reason: timeoutReason(timeoutSeconds), decidedAt: sql`now()` })
    .where(and(eq(toolApprovals.id, id), eq(toolApprovals.status, "pending"), sql`${toolApprovals.expiresAt} <= now()`));
  const [row] = await db
    .select({ status: toolApprovals.status, reason: toolApprovals.reason, inputHash: toolApprovals.inputHash })
    .from(toolApprovals)
    .where(eq(toolApprovals.id, id));
  return row && row.status !== "pending" ? (row as Decision) : undefined;
}

/** Denies a waiting row if it still waits (its run ended); the decision that won is read after. */
async function denyIfWaiting(db: DbOrTx, id: string, reason: string): Promise<void> {
  await db
    .update(toolApprovals)
    .set({ status: "denied", reason, decidedAt: sql`now()` })
    .where(and(eq(toolApprovals.id, id), eq(toolApprovals.status, "pending")));
}

// One LISTEN connection per database client, shared by the waiting children of this process.
const hubs = new WeakMap<object, { listeners: Set<(payload: string) => void>; ready: Promise<void> }>();

function listenFor(db: Db, listener: (payload: string) => void): { ready: Promise<void>; stop: () => void } {
  const client = driverOf(db);
  let hub = hubs.get(client);
  if (!hub) {
    const listeners = new Set<(payload: string) => void>();
    const ready = client
      .listen(APPROVAL_CHANNEL, (payload) => {
        for (const l of listeners) l(payload);
      })
      .then(() => undefined)
      .catch((err) => log.warn({ err }, "approval LISTEN failed; waiting children poll"));
    hub = { listeners, ready };
    hubs.set(client, hub);
  }
  const h = hub;
  h.listeners.add(listener);
  return { ready: h.ready, stop: () => h.listeners.delete(listener) };
}

/**
 * A child's call waits here for its decision: a notification or the poll finds it; at its
 * expiry it is denied (unless a person's decision won first); when the run is aborted (Stop,
 * the lead's response ended) it stops waiting and the row no longer waits either.
 */
export async function waitForDecision(
  db: Db,
  args: { approval: ChildApproval; timeoutSeconds: number; signal: AbortSignal },
): Promise<Decision> {
  const { approval, signal } = args;
  let wake: () => void = () => {};
  const sub = listenFor(db, (payload) => {
    if (payload === `decided:${approval.id}`) wake();
  });
  try {
    await sub.ready;
    for (;;) {
      const found = await readDecision(db, approval.id, args.timeoutSeconds);
      if (found) return found;
      if (signal.aborted) {
        await denyIfWaiting(db, approval.id, "the run ended before a decision").catch(() => {});
        throw signal.reason ?? new Error("aborted");
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.min(POLL_MS, Math.max(10, approval.expiresAt.getTime() - Date.now())));
        function done() {
          clearTimeout(timer);
          signal.removeEventListener("abort", done);
          resolve();
        }
        wake = done;
        signal.addEventListener("abort", done, { once: true });
      });
    }
  } finally {
    sub.stop();
  }
}

/** The error a denied call reaches the model with: "denied by the user: <reason>". */
export function deniedError(reason: string | null): AppError {
  return new AppError("forbidden", deniedText(reason));
}

/**
 * The check right before an approved call runs: the arguments it is about to get must hash as
 * the ones approved. A stored message or row edited after the request never runs changed.
 */
export function assertSameArguments(decision: { inputHash: string | null }, input: unknown): void {
  if (!decision.inputHash || decision.inputHash !== inputHash(input))
    throw new AppError("forbidden", "the call's arguments differ from the ones the person approved; it was not run");
}

/**
 * The lead's approved call, right before it runs (the AI SDK runs approved calls at the start of
 * the continuation): its row must be this thread's lead row for that call id, approved, with the
 * hash of these arguments. Anything else is refused and the call does not run.
 */
export async function approvedLeadCall(
  db: DbOrTx,
  args: { threadId: string; toolCallId: string; input: unknown },
): Promise<{ option: string | null }> {
  const a = toolApprovals;
  const [row] = await db
    .select({ status: a.status, inputHash: a.inputHash, option: a.option })
    .from(a)
    .where(and(eq(a.threadId, args.threadId), eq(a.kind, "lead"), eq(a.toolCallId, args.toolCallId)))
    .orderBy(sql`${a.createdAt} desc`)
    .limit(1);
  if (row?.status !== "approved")
    throw new AppError("forbidden", "this call needs a person's approval and has none; it was not run");
  assertSameArguments(row, args.input);
  return { option: row.option };
}

/** Lead rows of the thread whose decisions no continuation has carried to the model yet. */
export async function openLeadApprovals(db: DbOrTx, threadId: string) {
  const a = toolApprovals;
  return db
    .select()
    .from(a)
    .where(and(eq(a.threadId, threadId), eq(a.kind, "lead"), sql`${a.continuedAt} is null`))
    .orderBy(asc(a.createdAt));
}

/** Threads with a lead call decided and not yet continued (the sweep's work after a restart). */
export async function threadsToContinue(db: DbOrTx, limit: number): Promise<string[]> {
  const a = toolApprovals;
  const rows = await db
    .selectDistinct({ threadId: a.threadId })
    .from(a)
    .where(and(eq(a.kind, "lead"), sql`${a.continuedAt} is null`, or(eq(a.status, "approved"), eq(a.status, "denied"))))
    .limit(limit);
  return rows.map((r) => r.threadId!).filter(Boolean);
}

/**
 * Marks the decided lead rows of one run as carried to the model, if none of its calls still
 * waits and no one marked them first: the claim of the continuation, in its transaction.
 */
export async function claimContinuation(tx: DbOrTx, args: { threadId: string; runId: string }) {
  const rows = await tx.execute<{ id: string }>(sql`
    update ${toolApprovals} a set continued_at = now()
     where a.thread_id = ${args.threadId} and a.run_id = ${args.runId} and a.kind = 'lead' and a.continued_at is null
       and a.status <> 'pending'
       and not exists (select 1 from ${toolApprovals} p
                        where p.run_id = ${args.runId} and p.kind = 'lead' and p.status = 'pending')
    returning a.id`);
  return rows.length;
}

/** The waiting lead calls of a thread denied at once (a message that interrupts them). */
export async function denyLeadApprovals(db: DbOrTx, args: { threadId: string; reason: string }): Promise<number> {
  const rows = await db
    .update(toolApprovals)
    .set({ status: "denied", reason: args.reason, decidedAt: sql`now()` })
    .where(and(eq(toolApprovals.threadId, args.threadId), eq(toolApprovals.kind, "lead"), eq(toolApprovals.status, "pending")))
    .returning({ id: toolApprovals.id });
  for (const r of rows) await notifyDecided(db, r.id);
  return rows.length;
}
