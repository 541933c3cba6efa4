import { and, eq, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import { noticeOptions } from "@/lib/api/model-facts";
import { CHILDREN_SETTLED, type ChildrenSettledNotice, type SettledChild } from "@/lib/api/subagents";
import { abortBackground, recoverBackgroundCalls } from "@/server/agent/background";
import type { Db } from "@/server/db/client";
import { storable, storableText } from "@/server/db/storable";
import { messages } from "@/server/db/schema";
import { AppError, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { resolveModel } from "@/server/models";
import type { ResolvedModel } from "@/server/models/types";
import { startLeadRun } from "./lead-run";
import { onChatStreamEvent } from "./streams";

/**
 * Waking the lead when the children of a background `task` / `agent_swarm` call have settled
 * (server/agent/background.ts settles the `child_wakeups` row). Exactly once whichever web
 * process notices: a process claims a settled row with a lease (FOR UPDATE SKIP LOCKED), starts
 * the lead in the thread through startLeadRun with a system trigger (the reply is stored with
 * `{ trigger: "children_settled", run_ids }` and streams like any response; over the daily token
 * quota or chat.max_system_turns it is a notice and no model call: unattended.ts), writes the reply's
 * id on the row at once, and marks the row done when it ends. A thread that is busy answers 409:
 * the row is released to wait its turn. A claimer that finds the reply already stored (its
 * process died after the reply) only marks the row done.
 */

export const CHILD_WAKEUP_MAX_ATTEMPTS = 3;
/** Wake-ups one user may have running at once, across every web process (as batch wake-ups). */
export const CHILD_WAKEUP_PER_USER_LIMIT = 2;
const LEASE_SECONDS = 600;
/** A busy thread is asked again after this long. */
const BUSY_RETRY_MS = 1_000;
/** Background calls of gone processes are looked for this often (OWNER_SILENT_SECONDS bounds the wait). */
const RECOVERY_INTERVAL_MS = 5_000;

export interface ChildWakeupRow extends Record<string, unknown> {
  id: number;
  thread_id: string;
  user_id: string;
  lead_run_id: string;
  tool_call_id: string;
  tool: "task" | "agent_swarm";
  run_ids: string[];
  interrupted: boolean;
  result: { children?: SettledChild[] } | null;
  attempts: number;
  message_id: string | null;
}

export interface ChildWakeupOptions {
  db: Db;
  config: FlotillaConfig;
  owner: string;
  /** The lead's model; default this process's resolved model. */
  model?: ResolvedModel;
  /** First retry delay after a failed run (doubles each attempt). */
  backoffBaseMs?: number;
}

/**
 * Claims up to `limit` settled background calls for `owner`, fairly (as claimWakeups in
 * wakeup.ts): round-robin over the users with due rows, each user at most `perUser` running
 * (live leases of any process count), none in a thread whose wake-up runs.
 */
export async function claimChildWakeups(
  db: Db,
  owner: string,
  options: { limit?: number; perUser?: number } = {},
): Promise<ChildWakeupRow[]> {
  const limit = options.limit ?? 1;
  if (limit <= 0) return [];
  const perUser = options.perUser ?? CHILD_WAKEUP_PER_USER_LIMIT;
  return db.execute<ChildWakeupRow>(sql`
    with due_users as (
      select distinct user_id from child_wakeups
       where done_at is null and settled_at is not null and next_attempt_at <= now()
         and (lease_expires_at is null or lease_expires_at < now())
    ),
    picked as (
      select c.id, c.next_attempt_at, row_number() over (partition by c.user_id order by c.next_attempt_at, c.id) as turn
        from due_users u
        cross join lateral (
          select w.id, w.user_id, w.next_attempt_at from child_wakeups w
           where w.user_id = u.user_id and w.done_at is null and w.settled_at is not null and w.next_attempt_at <= now()
             and (w.lease_expires_at is null or w.lease_expires_at < now())
             and not exists (
               select 1 from child_wakeups r where r.thread_id = w.thread_id and r.done_at is null and r.lease_expires_at >= now())
           order by w.next_attempt_at, w.id
           limit greatest(0, ${perUser} - (
             select count(*) from child_wakeups f
              where f.user_id = u.user_id and f.done_at is null and f.lease_expires_at >= now()))
           for update skip locked
        ) c
    ),
    chosen as (select id from picked order by turn, next_attempt_at, id limit ${limit})
    update child_wakeups w
       set claimed_by = ${owner}, claimed_at = now(), attempts = w.attempts + 1,
           lease_expires_at = now() + make_interval(secs => ${LEASE_SECONDS})
      from chosen
     where w.id = chosen.id
    returning w.id, w.thread_id, w.user_id, w.lead_run_id, w.tool_call_id, w.tool, w.run_ids::text[] as run_ids,
              w.interrupted, w.result, w.attempts, w.message_id`);
}

export function childrenNotice(row: ChildWakeupRow): ChildrenSettledNotice {
  return {
    kind: "children_settled",
    tool: row.tool,
    tool_call_id: row.tool_call_id,
    run_ids: row.run_ids,
    interrupted: row.interrupted,
    children: row.result?.children ?? [],
  };
}

/** The notice as the lead model reads it: each child's outcome, and what to do with them. */
export function childrenNoticeText(n: ChildrenSettledNotice): string {
  const what = n.tool === "task" ? "background task" : "background agent_swarm";
  const lines = [
    `[Automatic notice, not a user message] The ${what} you started (tool call ${n.tool_call_id}) has settled.`,
  ];
  if (n.interrupted)
    lines.push("The server restarted while it ran: children that had not finished were marked interrupted and not restarted.");
  for (const c of n.children) {
    lines.push("", `${c.item_id ? `${c.item_id} ` : ""}(${c.definition}, run ${c.run_id}) ${c.status}`);
    if (c.status === "completed" && c.result) lines.push(c.result);
    else if (c.error) lines.push(`error: ${c.error}`);
  }
  lines.push(
    "",
    "Tell the user in a short message what it produced and what (if anything) needs their attention. Do not start it again.",
  );
  return lines.join("\n");
}

const fenced = (row: ChildWakeupRow, owner: string) =>
  sql`id = ${row.id} and claimed_by = ${owner} and done_at is null`;

async function markDone(db: Db, row: ChildWakeupRow, owner: string, messageId: string | null): Promise<void> {
  await db.execute(sql`
    update child_wakeups set done_at = now(), lease_expires_at = null, message_id = coalesce(${messageId}, message_id)
     where ${fenced(row, owner)}`);
}

async function retryLater(db: Db, row: ChildWakeupRow, owner: string, delayMs: number, error: string | null, counted: boolean) {
  await db.execute(sql`
    update child_wakeups set claimed_by = null, lease_expires_at = null, last_error = coalesce(${storableText(error)}, last_error),
           attempts = attempts - ${counted ? 0 : 1}, next_attempt_at = now() + make_interval(secs => ${delayMs / 1000})
     where ${fenced(row, owner)}`);
}

async function replyStored(db: Db, row: ChildWakeupRow, messageId: string | null): Promise<boolean> {
  if (!messageId) return false;
  const [m] = await db
    .select({ id: messages.id })
    .from(messages)
    .where(and(eq(messages.threadId, row.thread_id), eq(messages.id, messageId)));
  return m !== undefined;
}

/** Runs a claimed wake-up: the lead's reply stored once, or a later turn (busy thread, failed run), or the could-not-report note. */
export async function runClaimedChildWakeup(options: ChildWakeupOptions, row: ChildWakeupRow): Promise<void> {
  const { db, config, owner } = options;
  const wlog = log.child({ child_wakeup_id: row.id, thread_id: row.thread_id, run_id: row.lead_run_id });
  const metadata = { trigger: CHILDREN_SETTLED, run_ids: row.run_ids };
  if (await replyStored(db, row, row.message_id)) return markDone(db, row, owner, null);
  const notice = childrenNotice(row);
  const finished =
    `The background ${row.tool === "task" ? "task" : "swarm"} finished ` +
    `(${notice.children.map((c) => `${c.item_id ?? c.definition}: ${c.status}`).join(", ")})`;
  let error: string;
  try {
    const started = await startLeadRun(db, {
      config,
      model: options.model ?? resolveModel(config),
      userId: row.user_id,
      threadId: row.thread_id,
      trigger: {
        kind: "system",
        text: childrenNoticeText(notice),
        metadata,
        providerMetadata: noticeOptions(notice),
        refused: (why) => `${finished}, but I did not read its results: ${why}. Its results are on its card above.`,
      },
    });
    await db.execute(sql`update child_wakeups set message_id = ${started.messageId} where ${fenced(row, owner)}`);
    await started.done;
    if (await replyStored(db, row, started.messageId)) {
      await markDone(db, row, owner, started.messageId);
      wlog.info({ message_id: started.messageId }, "lead woken for settled background children");
      return;
    }
    error = "the lead answered nothing";
  } catch (err) {
    // A response runs in the thread: this one waits its turn (not an attempt).
    if (err instanceof AppError && err.code === "conflict") return retryLater(db, row, owner, BUSY_RETRY_MS, null, false);
    if (err instanceof AppError && err.code === "not_found") return markDone(db, row, owner, null);
    error = errorText(err);
  }
  if (row.attempts < CHILD_WAKEUP_MAX_ATTEMPTS) {
    const delayMs = (options.backoffBaseMs ?? 5_000) * 2 ** (row.attempts - 1);
    wlog.warn({ err: error, attempts: row.attempts, retry_in_ms: delayMs }, "background wake-up failed; will retry");
    return retryLater(db, row, owner, delayMs, error, true);
  }
  // The thread still learns that its background work ended, with each child's status.
  const id = `bgwake_${row.id}`;
  const text = `${finished}, but I could not report on it: ${error}. Its results are on its card above.`;
  await db
    .insert(messages)
    .values({ id, threadId: row.thread_id, role: "assistant", parts: storable([{ type: "text", text }]), metadata })
    .onConflictDoNothing({ target: [messages.threadId, messages.id] });
  await markDone(db, row, owner, id);
  wlog.error({ err: error, attempts: row.attempts }, "background wake-up gave up; stored a could-not-report message");
}

/**
 * What a web process runs beside the wake-up pool: Stop of a lead run (or of a background
 * task's child) from any process reaches the background calls running here, and background
 * calls of processes that are gone are marked interrupted and settled. Returns the stop function.
 */
export function startBackgroundSweeps(options: { db: Db; intervalMs?: number }): () => void {
  let stopped = false;
  let unsubscribe: (() => void) | undefined;
  void onChatStreamEvent(options.db, (payload) => {
    if (payload.startsWith("stop:")) abortBackground(payload.slice("stop:".length));
  }).then((off) => {
    if (stopped) off();
    else unsubscribe = off;
  });
  const recover = () =>
    recoverBackgroundCalls(options.db).catch((err) => log.warn({ err }, "recovery of background calls failed"));
  const timer = setInterval(recover, options.intervalMs ?? RECOVERY_INTERVAL_MS);
  timer.unref();
  void recover();
  return () => {
    stopped = true;
    clearInterval(timer);
    unsubscribe?.();
  };
}
