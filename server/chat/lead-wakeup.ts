import type { ProviderMetadata } from "ai";
import { type SQL, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import type { ChatMessageMetadata } from "@/lib/api/chat";
import type { Db } from "@/server/db/client";
import { storableText } from "@/server/db/storable";
import { AppError, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { resolveModel } from "@/server/models";
import type { ResolvedModel } from "@/server/models/types";
import { startLeadRun } from "./lead-run";
import { saveMessage } from "./messages";

/**
 * One wake-up of the lead, whatever woke it: a settled batch (wakeup.ts) or the settled
 * children of a background call (children-wakeup.ts). The two differ only in their table and
 * in what they report (a WakeupKind); everything else is here, once:
 *
 * - the claim: due rows, fairly (round-robin over users, each at most `perUser` in flight across
 *   every web process), none in a thread where a wake-up of either kind holds a lease;
 * - the run: startLeadRun under the thread's stream lock, so it never runs beside another
 *   response of the thread (a person's, a queued message's, the other kind of wake-up), and
 *   unattended.ts reads chat.max_system_turns and the quota under that lock, after the reply
 *   before it was stored: the cap is exact. A busy thread answers 409 and the row waits its
 *   turn (not an attempt);
 * - exactly once: the reply's id is derived from the row, so a repeated run (after a crash
 *   between the reply and done_at) overwrites it, and a claimer that finds it stored only marks
 *   the row done;
 * - failures: retried with backoff, then a could-not-report message under the same id.
 */

export type WakeupTable = "batch_wakeups" | "child_wakeups";

export const WAKEUP_MAX_ATTEMPTS = 3;
/** Wake-ups of one kind one user may have running at once, across every web process. */
export const WAKEUP_PER_USER_LIMIT = 2;
export const WAKEUP_LEASE_SECONDS = 600;
/** A wake-up's response ends within this long (nobody watches it to press Stop). */
const RUN_TIMEOUT_MS = 5 * 60_000;
/** A busy thread is asked again after this long. */
const BUSY_RETRY_MS = 1_000;

/** The columns every claimed wake-up row has. */
export interface ClaimedWakeup extends Record<string, unknown> {
  id: number;
  thread_id: string;
  user_id: string;
  attempts: number;
}

/** What one wake-up tells the lead, and the thread when the lead cannot answer. */
export interface WakeupReport {
  /** The reply's id, derived from the row. */
  messageId: string;
  /** The facts as the model reads them (the last turn; not stored). */
  text: string;
  providerMetadata?: ProviderMetadata;
  /** Merged into the stored reply (trigger, batch_id / run_ids). */
  metadata: ChatMessageMetadata & Record<string, unknown>;
  /** The notice stored instead when unattended.ts refuses the run (`why` ends a sentence). */
  refused: (why: string) => string;
  /** The message stored when every attempt failed. */
  gaveUp: (error: string) => string;
}

export interface WakeupKind<Row extends ClaimedWakeup> {
  table: WakeupTable;
  /** What makes a row due besides its time (on alias `w`). */
  due: SQL;
  /** The claim's returned columns (on alias `w`). */
  returning: SQL;
  /** Undefined: nothing to report any more (the row is marked done). */
  report: (db: Db, row: Row) => Promise<WakeupReport | undefined>;
}

export interface WakeupOptions {
  db: Db;
  config: FlotillaConfig;
  owner: string;
  /** The lead's model; default this process's resolved model. */
  model?: ResolvedModel;
  /** First retry delay after a failed run (doubles each attempt). */
  backoffBaseMs?: number;
}

const live = (table: WakeupTable) =>
  sql`exists (select 1 from ${sql.identifier(table)} r where r.thread_id = w.thread_id and r.done_at is null and r.lease_expires_at >= now())`;

/** Claims up to `limit` due rows of `kind` for `owner` (see the module's comment). */
export async function claimDue<Row extends ClaimedWakeup>(
  db: Db,
  kind: WakeupKind<Row>,
  owner: string,
  options: { limit?: number; perUser?: number; leaseSeconds?: number } = {},
): Promise<Row[]> {
  const limit = options.limit ?? 1;
  if (limit <= 0) return [];
  const table = sql.identifier(kind.table);
  const due = sql`w.done_at is null and ${kind.due} and w.next_attempt_at <= now() and (w.lease_expires_at is null or w.lease_expires_at < now())`;
  const rows = await db.execute<Row>(sql`
    with due_users as (select distinct w.user_id from ${table} w where ${due}),
    picked as (
      select c.id, c.next_attempt_at, row_number() over (partition by c.user_id order by c.next_attempt_at, c.id) as turn
        from due_users u
        cross join lateral (
          select w.id, w.user_id, w.next_attempt_at from ${table} w
           where w.user_id = u.user_id and ${due}
             -- One lead run per thread at a time: the next one reads the reply of the one before.
             and not ${live("batch_wakeups")} and not ${live("child_wakeups")}
           order by w.next_attempt_at, w.id
           limit greatest(0, ${options.perUser ?? WAKEUP_PER_USER_LIMIT} - (
             select count(*) from ${table} f
              where f.user_id = u.user_id and f.done_at is null and f.lease_expires_at >= now()))
           for update skip locked
        ) c
    ),
    chosen as (select id from picked order by turn, next_attempt_at, id limit ${limit})
    update ${table} w
       set claimed_by = ${owner}, claimed_at = now(), attempts = w.attempts + 1,
           lease_expires_at = now() + make_interval(secs => ${options.leaseSeconds ?? WAKEUP_LEASE_SECONDS})
      from chosen
     where w.id = chosen.id
    returning ${kind.returning}`);
  return [...rows] as Row[];
}

const fenced = (table: WakeupTable, row: ClaimedWakeup, owner: string) =>
  sql`${sql.identifier(table)}.id = ${row.id} and claimed_by = ${owner} and done_at is null`;

async function markDone(db: Db, table: WakeupTable, row: ClaimedWakeup, owner: string, messageId: string | null): Promise<void> {
  await db.execute(sql`
    update ${sql.identifier(table)} set done_at = now(), lease_expires_at = null, message_id = coalesce(${messageId}, message_id)
     where ${fenced(table, row, owner)}`);
}

async function retryLater(db: Db, table: WakeupTable, row: ClaimedWakeup, owner: string, delayMs: number, error: string | null) {
  await db.execute(sql`
    update ${sql.identifier(table)} set claimed_by = null, lease_expires_at = null, last_error = coalesce(${storableText(error)}, last_error),
           attempts = attempts - ${error === null ? 1 : 0}, next_attempt_at = now() + make_interval(secs => ${delayMs / 1000})
     where ${fenced(table, row, owner)}`);
}

/** The reply is in the thread: a notice, a response the person stopped, or a completed one with text. */
async function replyStored(db: Db, threadId: string, messageId: string): Promise<boolean> {
  const [row] = await db.execute<{ ok: boolean }>(sql`
    select true as ok from messages m
     where m.thread_id = ${threadId} and m.id = ${messageId} and m.role = 'assistant'
       and (m.metadata ? 'notice' or m.metadata ->> 'status' = 'cancelled'
            or (m.metadata ->> 'status' = 'completed'
                and exists (select 1 from jsonb_array_elements(m.parts) p where p ->> 'type' = 'text' and btrim(p ->> 'text') <> '')))`);
  return row?.ok === true;
}

async function runError(db: Db, runId: string | null): Promise<string> {
  if (!runId) return "the lead answered nothing";
  const [run] = await db.execute<{ status: string; error: string | null }>(sql`select status, error from agent_runs where id = ${runId}`);
  return run?.error ?? (run?.status === "completed" || !run ? "the lead answered nothing" : `lead run ${run.status}`);
}

/** Runs a claimed wake-up: the lead's reply stored once, or a later turn (busy thread, failed run), or the could-not-report message. */
export async function runClaimed<Row extends ClaimedWakeup>(options: WakeupOptions, kind: WakeupKind<Row>, row: Row): Promise<void> {
  const { db, config, owner } = options;
  const { table } = kind;
  const wlog = log.child({ wakeup: table, wakeup_id: row.id, thread_id: row.thread_id });
  const report = await kind.report(db, row);
  if (!report) return markDone(db, table, row, owner, null);
  if (await replyStored(db, row.thread_id, report.messageId)) return markDone(db, table, row, owner, report.messageId);
  let error: string;
  try {
    const started = await startLeadRun(db, {
      config,
      model: options.model ?? resolveModel(config),
      userId: row.user_id,
      threadId: row.thread_id,
      messageId: report.messageId,
      signal: AbortSignal.timeout(RUN_TIMEOUT_MS),
      trigger: { kind: "system", text: report.text, metadata: report.metadata, providerMetadata: report.providerMetadata, refused: report.refused },
    });
    await db.execute(sql`update ${sql.identifier(table)} set message_id = ${report.messageId} where ${fenced(table, row, owner)}`);
    await started.done;
    if (await replyStored(db, row.thread_id, report.messageId)) {
      await markDone(db, table, row, owner, report.messageId);
      wlog.info({ message_id: report.messageId, run_id: started.runId }, "lead woken");
      return;
    }
    error = await runError(db, started.runId);
  } catch (err) {
    // A response runs in the thread: this one waits its turn (not an attempt).
    if (err instanceof AppError && err.code === "conflict") return retryLater(db, table, row, owner, BUSY_RETRY_MS, null);
    if (err instanceof AppError && err.code === "not_found") return markDone(db, table, row, owner, null);
    error = errorText(err);
  }
  if (row.attempts < WAKEUP_MAX_ATTEMPTS) {
    const delayMs = (options.backoffBaseMs ?? 5_000) * 2 ** (row.attempts - 1);
    wlog.warn({ err: error, attempts: row.attempts, retry_in_ms: delayMs }, "wake-up failed; will retry");
    return retryLater(db, table, row, owner, delayMs, error);
  }
  // The thread still learns what ended, under the reply's id (a failed attempt's partial reply is replaced).
  const text = report.gaveUp(error);
  await saveMessage(db, { threadId: row.thread_id, message: { id: report.messageId, role: "assistant", parts: [{ type: "text", text }], metadata: report.metadata } });
  await markDone(db, table, row, owner, report.messageId);
  wlog.error({ err: error, attempts: row.attempts }, "wake-up gave up; stored a could-not-report message");
}
