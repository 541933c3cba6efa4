import { createUIMessageStream } from "ai";
import { eq, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import { startLeadResponse } from "@/server/agent/lead";
import { type BatchSettledNotice, checkFailureLine, checkPassRate, noticeOptions } from "@/lib/api/model-facts";
import type { ChatMessage } from "@/lib/api/chat";
import { loadMessages } from "@/server/chat/messages";
import { getConfig } from "@/server/config/load";
import { type Db, getDatabase } from "@/server/db/client";
import { storable, storableText } from "@/server/db/storable";
import { messages, subagentBatches } from "@/server/db/schema";
import { log } from "@/server/log";
import { resolveModel } from "@/server/models";
import type { ResolvedModel } from "@/server/models/types";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { usedCostUsd } from "@/server/batches/budget";
import { specColumns } from "@/server/batches/spec";
import type { BatchRow } from "@/server/batches/types";
import { claimDeliveries, deliverClaimed } from "@/server/batches/webhooks";
import { errorText } from "@/server/errors";
import { claimChildWakeups, runClaimedChildWakeup, startBackgroundSweeps } from "./children-wakeup";
import { refuseUnattended } from "./unattended";

/**
 * Waking the lead when a batch it submitted settles — exactly once per settlement.
 *
 * The settling transaction (whichever process: a worker's settle, lease recovery, a web cancel)
 * inserts a pending row into batch_wakeups, unique per (batch_id, settlement_seq). Only web
 * processes run wake-ups (they have the lead agent and the chat); workers only ever write the
 * row. A web process claims a due row with FOR UPDATE SKIP LOCKED and a lease, runs the lead
 * headlessly in the batch's thread with a bounded summary, and stores the reply together with
 * done_at in one transaction fenced by its claim: a process that lost its lease writes nothing.
 * The reply's message id is derived from (batch, settlement), so even a run repeated after a
 * crash between model and commit cannot store a second message.
 *
 * Over the user's daily token quota or chat.max_system_turns (unattended.ts), the reply is a
 * short notice and the model is not called.
 *
 * No web process up: the row waits, and the first web process to start runs it. The model
 * fails: retried with backoff (WAKEUP_MAX_ATTEMPTS in all), then an assistant message saying
 * the summary could not be produced (with the counts) is stored instead, so the thread still
 * learns that the batch settled.
 */

export const WAKEUP_MAX_ATTEMPTS = 3;
export const WAKEUP_LEASE_SECONDS = 600;
/** At most this many failed items are grouped into the summary, and this many groups shown. */
const FAILURE_SAMPLE = 200;
const FAILURE_GROUPS = 5;
/** Items with a failed verdict shown with their reasons, and the characters of each reason. */
const CHECK_FAILURE_ITEMS = 5;
const CHECK_REASON_CHARS = 200;

export interface WakeupRow extends Record<string, unknown> {
  id: number;
  batch_id: string;
  thread_id: string;
  user_id: string;
  settlement_seq: number;
  settled_status: string;
  attempts: number;
}

export function wakeupMessageId(batchId: string, seq: number): string {
  return `wake_${batchId.replace(/-/g, "")}_${seq}`;
}

/** Wake-ups one user may have running at once, across every web process. */
export const WAKEUP_PER_USER_LIMIT = 2;

/**
 * Claims up to `limit` due wake-ups for `owner` (one process per row; an expired lease is
 * claimable again), fairly: round-robin over the users with due rows, each user at most
 * `perUser` running (live leases of any process count), none in a thread whose wake-up runs.
 */
export async function claimWakeups(
  db: Db,
  owner: string,
  options: { limit?: number; perUser?: number; leaseSeconds?: number } = {},
): Promise<WakeupRow[]> {
  const limit = options.limit ?? 1;
  if (limit <= 0) return [];
  const perUser = options.perUser ?? WAKEUP_PER_USER_LIMIT;
  return db.execute<WakeupRow>(sql`
    with due_users as (
      select distinct user_id from batch_wakeups
       where done_at is null and next_attempt_at <= now() and (lease_expires_at is null or lease_expires_at < now())
    ),
    picked as (
      select c.id, c.next_attempt_at, row_number() over (partition by c.user_id order by c.next_attempt_at, c.id) as turn
        from due_users u
        cross join lateral (
          select w.id, w.user_id, w.next_attempt_at from batch_wakeups w
           where w.user_id = u.user_id and w.done_at is null and w.next_attempt_at <= now()
             and (w.lease_expires_at is null or w.lease_expires_at < now())
             -- One lead run per thread at a time: the next one reads the reply of the one before.
             and not exists (
               select 1 from batch_wakeups r
                where r.thread_id = w.thread_id and r.done_at is null and r.lease_expires_at >= now())
           order by w.next_attempt_at, w.id
           limit greatest(0, ${perUser} - (
             select count(*) from batch_wakeups f
              where f.user_id = u.user_id and f.done_at is null and f.lease_expires_at >= now()))
           for update skip locked
        ) c
    ),
    chosen as (select id from picked order by turn, next_attempt_at, id limit ${limit})
    update batch_wakeups w
       set claimed_by = ${owner}, claimed_at = now(), attempts = w.attempts + 1,
           lease_expires_at = now() + make_interval(secs => ${options.leaseSeconds ?? WAKEUP_LEASE_SECONDS})
      from chosen
     where w.id = chosen.id
    returning w.id, w.batch_id, w.thread_id, w.user_id, w.settlement_seq, w.settled_status, w.attempts`);
}

/** Claims one due wake-up for `owner` (fairly, as claimWakeups). */
export async function claimWakeup(db: Db, owner: string, options: { perUser?: number } = {}): Promise<WakeupRow | undefined> {
  const [row] = await claimWakeups(db, owner, { ...options, limit: 1 });
  return row;
}

/** Per check, in the submission's order: the counts the settling statements keep (0 of 0 before any answer was checked). */
async function checkCounts(db: Db, batch: BatchRow): Promise<BatchSettledNotice["checks"]> {
  const names = specColumns(batch).checks;
  if (names.length === 0) return [];
  const rows = await db.execute<{ name: string; passed: number; failed: number }>(sql`
    select name, passed, failed from subagent_batch_check_counts where batch_id = ${batch.id}`);
  const byName = new Map(rows.map((r) => [r.name, r]));
  return names.map((name) => ({ name, passed: Number(byName.get(name)?.passed ?? 0), failed: Number(byName.get(name)?.failed ?? 0) }));
}

/** The first items whose verdict is failed (the partial index on failed verdicts), each with its failed checks' reasons, cut. */
async function checkFailures(db: Db, batch: BatchRow): Promise<BatchSettledNotice["check_failures"]> {
  if (batch.verdictFailedCount === 0) return [];
  const rows = await db.execute<{ itemKey: string; checks: { name: string; reason: string | null }[] }>(sql`
    select i.item_key as "itemKey",
           coalesce((select jsonb_agg(jsonb_build_object('name', c->>'name', 'reason', left(c->>'reason', ${CHECK_REASON_CHARS})))
                       from jsonb_array_elements(case when jsonb_typeof(i.checks) = 'array' then i.checks else '[]' end) c
                      where c->'passed' is distinct from 'true'::jsonb), '[]') as checks
      from subagent_batch_items i
     where i.batch_id = ${batch.id} and i.verdict = 'failed'
     order by i.position limit ${CHECK_FAILURE_ITEMS}`);
  return rows.map((r) => ({
    item_key: r.itemKey,
    checks: r.checks.map((c) => ({ name: c.name, reason: c.reason === null ? null : c.reason.replace(/\s+/g, " ").trim() })),
  }));
}

/** The settled batch's facts for the lead: counts, usage, cost, the first failures grouped by error, and the checks' pass rates. */
export async function buildWakeupNotice(
  db: Db,
  batch: BatchRow,
  settledStatus: string,
  settlement: number,
): Promise<BatchSettledNotice> {
  // Items that ended failed, found through their failed / lease-expired attempts (a small
  // partial index) instead of a walk over every item; a retried item that later succeeded
  // no longer counts. The error is the item's final one.
  const failed = await db.execute<{ error: string | null; itemKey: string }>(sql`
    select i.error, i.item_key as "itemKey" from subagent_batch_items i
     where i.id in (
       select a.item_id from subagent_batch_item_attempts a
        where a.batch_id = ${batch.id} and a.outcome in ('failed', 'lease_expired')
        order by a.id limit ${FAILURE_SAMPLE * 5})
       and i.status = 'failed'
     order by i.position limit ${FAILURE_SAMPLE}`);
  const [checks, checkFailed] = await Promise.all([checkCounts(db, batch), checkFailures(db, batch)]);
  const groups = new Map<string, string[]>();
  for (const f of failed) {
    const key = (f.error ?? "unknown error").replace(/\s+/g, " ").slice(0, 200);
    groups.set(key, [...(groups.get(key) ?? []), f.itemKey]);
  }
  return {
    kind: "batch_settled",
    batch_id: batch.id,
    thread_id: batch.threadId,
    subagent: batch.subagent,
    status: settledStatus,
    settlement,
    total: batch.total,
    succeeded: batch.succeededCount,
    failed: batch.failedCount,
    cancelled: batch.cancelledCount,
    usage: { input_tokens: Number(batch.inputTokens), output_tokens: Number(batch.outputTokens) },
    cost_usd: usedCostUsd(batch),
    failures: [...groups]
      .sort((a, b) => b[1].length - a[1].length)
      .slice(0, FAILURE_GROUPS)
      .map(([error, keys]) => ({ error, count: keys.length, item_keys: keys.slice(0, 3) })),
    failures_sampled: failed.length === FAILURE_SAMPLE,
    verdicts: { passed: batch.verdictPassedCount, failed: batch.verdictFailedCount },
    checks,
    check_failures: checkFailed,
  };
}

/** The notice as the lead model reads it: the bounded facts, and what to do with them. */
export function wakeupNoticeText(n: BatchSettledNotice): string {
  const lines = [
    `[Automatic notice, not a user message] Durable batch ${n.batch_id} (sub-agent ${n.subagent}) ${n.status}.`,
    `Items: ${n.total} total, ${n.succeeded} succeeded, ${n.failed} failed, ${n.cancelled} cancelled.`,
    `Usage: ${n.usage.input_tokens} input + ${n.usage.output_tokens} output tokens, cost $${n.cost_usd.toFixed(4)}.`,
  ];
  if (n.failures.length > 0) {
    lines.push(`First failures by error${n.failures_sampled ? ` (of the first ${FAILURE_SAMPLE} failed items)` : ""}:`);
    for (const f of n.failures) lines.push(`- ${f.count} × ${f.error} (e.g. ${f.item_keys.join(", ")})`);
  }
  if (n.checks.length > 0) {
    lines.push(`Checks: ${n.verdicts.passed} items passed every check, ${n.verdicts.failed} failed at least one. Pass rate per check:`);
    for (const c of n.checks) lines.push(`- ${checkPassRate(c)}`);
  }
  if (n.check_failures.length > 0) {
    lines.push(`First items that failed a check${n.verdicts.failed > n.check_failures.length ? ` (${n.check_failures.length} of ${n.verdicts.failed})` : ""}:`);
    for (const f of n.check_failures) lines.push(`- ${checkFailureLine(f)}`);
  }
  lines.push(
    "Read results with batch_results(batch_id, status?, verdict?, cursor?, limit?) as needed, then tell the user in a short " +
      "message what the batch produced and what (if anything) needs their attention. Do not resubmit the batch.",
  );
  return lines.join("\n");
}

function textOf(message: ChatMessage): string {
  return message.parts
    .map((p) => (p.type === "text" ? p.text : ""))
    .join("")
    .trim();
}

/** Runs the lead once, headlessly; resolves with its reply, or throws when the model failed. */
async function runLead(args: {
  db: Db;
  config: FlotillaConfig;
  model: ResolvedModel;
  batch: BatchRow;
  notice: BatchSettledNotice;
  messageId: string;
}): Promise<ChatMessage> {
  const { db, config, model, batch } = args;
  const history = await loadMessages(db, { threadId: batch.threadId });
  // The facts ride along the text, so the simulator answers from them (and never takes the test
  // directives that item errors quote as its own).
  const notice: ChatMessage = {
    id: `${args.messageId}_notice`,
    role: "user",
    parts: [{ type: "text", text: wakeupNoticeText(args.notice), providerMetadata: noticeOptions(args.notice) }],
  };
  const lead = await startLeadResponse({
    db,
    config,
    model,
    userId: batch.userId,
    threadId: batch.threadId,
    messages: [...history, notice],
    signal: AbortSignal.timeout(5 * 60_000),
  });
  let settle!: { resolve: (m: ChatMessage) => void; reject: (e: unknown) => void };
  let streamError: string | undefined;
  const done = new Promise<ChatMessage>((resolve, reject) => {
    settle = { resolve, reject };
  });
  const stream = createUIMessageStream<ChatMessage>({
    originalMessages: [...history, notice],
    onError: (error) => {
      streamError ??= lead.errorText(error);
      return streamError;
    },
    async execute({ writer }) {
      writer.write({ type: "start", messageId: args.messageId });
      await lead.execute(writer);
    },
    async onFinish({ responseMessage, isAborted, finishReason }) {
      try {
        const metadata = await lead.finish({ aborted: isAborted, responseText: textOf(responseMessage), finishReason });
        if (metadata.status !== "completed" || textOf(responseMessage) === "")
          settle.reject(
            new Error(streamError ?? (metadata.status === "completed" ? "the lead answered nothing" : `lead run ${metadata.status}`)),
          );
        else settle.resolve({ ...responseMessage, metadata: { ...responseMessage.metadata, ...metadata } });
      } catch (err) {
        settle.reject(err);
      }
    },
  });
  const reader = stream.getReader();
  while (!(await reader.read()).done) {
    // Drained: the reply is collected by onFinish.
  }
  return done;
}

/** Stores the message and marks the wake-up done in one transaction, only while `owner` still holds it. */
async function complete(db: Db, row: WakeupRow, owner: string, message: ChatMessage): Promise<boolean> {
  return db.transaction(async (tx) => {
    const [marked] = await tx.execute<{ id: number }>(sql`
      update batch_wakeups set done_at = now(), message_id = ${message.id}, lease_expires_at = null
       where id = ${row.id} and claimed_by = ${owner} and done_at is null
      returning id`);
    if (!marked) return false;
    await tx
      .insert(messages)
      .values({
        id: message.id,
        threadId: row.thread_id,
        role: "assistant",
        parts: storable(message.parts),
        metadata: storable((message.metadata ?? null) as Record<string, unknown> | null),
      })
      .onConflictDoNothing({ target: [messages.threadId, messages.id] });
    await tx.execute(sql`update threads set updated_at = now() where id = ${row.thread_id}`);
    return true;
  });
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

/** Claims and runs one due wake-up. Returns false when none was due. */
export async function runOneWakeup(options: WakeupOptions): Promise<boolean> {
  const row = await claimWakeup(options.db, options.owner);
  if (!row) return false;
  await runClaimedWakeup(options, row);
  return true;
}

/** Runs a claimed wake-up: the lead's reply stored, or a retry scheduled, or the could-not-summarize note. */
export async function runClaimedWakeup(options: WakeupOptions, row: WakeupRow): Promise<void> {
  const { db, config, owner } = options;
  const wlog = log.child({ batch_id: row.batch_id, settlement_seq: row.settlement_seq, wakeup_id: row.id });
  const messageId = wakeupMessageId(row.batch_id, row.settlement_seq);
  const meta = { trigger: "batch_settled" as const, batch_id: row.batch_id };
  const [batch] = await db.select().from(subagentBatches).where(eq(subagentBatches.id, row.batch_id));
  if (!batch) return; // cascade-deleted with its thread
  const notice = await buildWakeupNotice(db, batch, row.settled_status, row.settlement_seq);
  const settled =
    `Batch ${row.batch_id} ${row.settled_status} (${batch.succeededCount} succeeded, ${batch.failedCount} failed, ` +
    `${batch.cancelledCount} cancelled of ${batch.total})`;
  const elsewhere = "Its results are in the batch panel and in results.jsonl.";
  try {
    // Nobody typed this run: over the daily token quota or chat.max_system_turns, a notice instead.
    const refusal = await refuseUnattended(db, config, { userId: row.user_id, threadId: row.thread_id, wakeup: true });
    if (refusal) {
      const text = `${settled}, but I did not summarize it: ${refusal.why}. ${elsewhere}`;
      const metadata = { ...meta, notice: refusal.notice };
      const stored = await complete(db, row, owner, { id: messageId, role: "assistant", parts: [{ type: "text", text }], metadata });
      wlog.info({ stored, notice: refusal.notice }, "a settled batch's wake-up stored a notice instead of running the lead");
      return;
    }
    const model = options.model ?? resolveModel(config);
    const reply = await runLead({ db, config, model, batch, notice, messageId });
    const stored = await complete(db, row, owner, { ...reply, id: messageId, metadata: { ...reply.metadata, ...meta } });
    wlog.info({ stored }, "lead woken for a settled batch");
  } catch (err) {
    const error = errorText(err);
    if (row.attempts >= WAKEUP_MAX_ATTEMPTS) {
      const text = `${settled}, but I could not produce a summary of it: ${error}. ${elsewhere}`;
      await complete(db, row, owner, { id: messageId, role: "assistant", parts: [{ type: "text", text }], metadata: meta });
      wlog.error({ err: error, attempts: row.attempts }, "wake-up gave up; stored a could-not-summarize message");
    } else {
      const delayMs = (options.backoffBaseMs ?? 5_000) * 2 ** (row.attempts - 1);
      await db.execute(sql`
        update batch_wakeups set last_error = ${storableText(error)}, claimed_by = null, lease_expires_at = null,
               next_attempt_at = now() + make_interval(secs => ${delayMs / 1000})
         where id = ${row.id} and claimed_by = ${owner} and done_at is null`);
      wlog.warn({ err: error, attempts: row.attempts, retry_in_ms: delayMs }, "wake-up failed; will retry");
    }
  }
}

/** Wake-ups (lead runs) one web process runs at once. */
export const WAKEUP_POOL_SIZE = 8;
/** Webhook deliveries one web process has in flight at once. */
export const WEBHOOK_POOL_SIZE = 16;

/**
 * A pool of at most `size` running jobs of one kind. `fill` asks `claim` for as many jobs as
 * there are free slots and starts them without waiting; a finished job fills its slot again.
 * The claim decides fairness (per-user limits), the pool bounds the process.
 */
class Pool<T> {
  private running = 0;
  private filling: Promise<void> | undefined;
  private again = false;
  private readonly jobs = new Set<Promise<void>>();
  constructor(
    private readonly size: number,
    private readonly claim: (free: number) => Promise<T[]>,
    private readonly run: (job: T) => Promise<void>,
    private readonly stopped: () => boolean,
  ) {}

  /** Claims work for the free slots; one claim at a time, and a fill asked for meanwhile runs right after it. */
  fill(): Promise<void> {
    if (this.filling) {
      this.again = true;
      return this.filling;
    }
    this.filling = (async () => {
      do {
        this.again = false;
        const free = this.size - this.running;
        if (free <= 0 || this.stopped()) return;
        try {
          for (const job of await this.claim(free)) this.start(job);
        } catch (err) {
          log.warn({ err }, "settlement runner claim failed");
          return;
        }
      } while (this.again);
    })().finally(() => {
      this.filling = undefined;
    });
    return this.filling;
  }

  private start(job: T): void {
    this.running++;
    const p = this.run(job)
      .catch((err) => log.warn({ err }, "settlement job failed"))
      .finally(() => {
        this.running--;
        this.jobs.delete(p);
        void this.fill();
      });
    this.jobs.add(p);
  }

  async drain(): Promise<void> {
    await this.filling;
    while (this.jobs.size > 0) await Promise.all([...this.jobs]);
  }
}

/**
 * The web process's runner for settlement side effects: lead wake-ups (settled batches, and
 * settled background children: children-wakeup.ts) and webhook deliveries,
 * each in its own pool (one kind never waits for the other), claimed fairly between users so
 * one user's slow endpoint or thousand batches delay no other user's. Pools are topped up
 * every `intervalMs` and whenever a job ends. Returns a stop function that waits for running jobs.
 */
export function startSettlementRunner(
  options: WakeupOptions & { intervalMs?: number; webhookBackoffBaseMs?: number },
): () => Promise<void> {
  let stopped = false;
  const isStopped = () => stopped;
  // Two wake-ups of one thread claimed together run one after the other, in claim order.
  const threadTail = new Map<string, Promise<void>>();
  const inThreadOrder = (row: WakeupRow) => {
    const run = (threadTail.get(row.thread_id) ?? Promise.resolve()).then(() => runClaimedWakeup(options, row));
    const tail = run.catch(() => {});
    threadTail.set(row.thread_id, tail);
    void tail.then(() => {
      if (threadTail.get(row.thread_id) === tail) threadTail.delete(row.thread_id);
    });
    return run;
  };
  const wakeups = new Pool(
    WAKEUP_POOL_SIZE,
    (free) => claimWakeups(options.db, options.owner, { limit: free }),
    inThreadOrder,
    isStopped,
  );
  const deliveries = new Pool(
    WEBHOOK_POOL_SIZE,
    (free) => claimDeliveries(options.db, { owner: options.owner, limit: free }),
    (row) =>
      deliverClaimed(options.db, row, { owner: options.owner, config: options.config, backoffBaseMs: options.webhookBackoffBaseMs }).then(
        () => {},
      ),
    isStopped,
  );
  // Background children settled (server/chat/children-wakeup.ts): the same pool size, their own claim.
  const children = new Pool(
    WAKEUP_POOL_SIZE,
    (free) => claimChildWakeups(options.db, options.owner, { limit: free }),
    (row) => runClaimedChildWakeup(options, row),
    isStopped,
  );
  const stopSweeps = startBackgroundSweeps({ db: options.db });
  const tick = () => {
    void wakeups.fill();
    void deliveries.fill();
    void children.fill();
  };
  const timer = setInterval(tick, options.intervalMs ?? 1_000);
  timer.unref();
  tick();
  return async () => {
    stopped = true;
    clearInterval(timer);
    stopSweeps();
    await Promise.all([wakeups.drain(), deliveries.drain(), children.drain()]);
  };
}

/** The web process's runner, started from instrumentation.ts. */
export function startWebSettlementRunner(): () => Promise<void> {
  return startSettlementRunner({ db: getDatabase().db, config: getConfig(), owner: INSTANCE_ID });
}
