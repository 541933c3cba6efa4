import { eq, sql } from "drizzle-orm";
import { type BatchSettledNotice, checkFailureLine, checkPassRate, isPilotPause, noticeOptions } from "@/lib/api/model-facts";
import { getConfig } from "@/server/config/load";
import { type Db, getDatabase } from "@/server/db/client";
import { subagentBatches } from "@/server/db/schema";
import { log } from "@/server/log";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { projectFromPilot, projectionSentence } from "@/lib/pilot-projection";
import { usedCostUsd } from "@/server/batches/budget";
import { specColumns } from "@/server/batches/spec";
import type { BatchRow } from "@/server/batches/types";
import { claimDeliveries, deliverClaimed } from "@/server/batches/webhooks";
import { childWakeups, startBackgroundSweeps } from "./children-wakeup";
import { type ClaimedWakeup, claimDue, runClaimed, type WakeupKind, type WakeupOptions, type WakeupReport } from "./lead-wakeup";

export { WAKEUP_LEASE_SECONDS, WAKEUP_MAX_ATTEMPTS, WAKEUP_PER_USER_LIMIT, type WakeupOptions } from "./lead-wakeup";

/**
 * Waking the lead when a batch it submitted settles — exactly once per settlement — and once when
 * it pauses after its pilot (settled_status "paused", under the settlement_seq it paused at).
 *
 * The settling (or pilot-pausing) transaction (whichever process: a worker's settle, lease
 * recovery, a web cancel) inserts a pending row into batch_wakeups, unique per (batch_id, settlement_seq). Only web
 * processes run wake-ups (they have the lead agent and the chat); workers only ever write the
 * row. A web process claims and runs it as one wake-up (lead-wakeup.ts: under the thread's
 * stream lock, exactly once, a notice instead over the quota or chat.max_system_turns, retried
 * then a could-not-summarize message with the counts); this module says what it reports: a
 * bounded summary of the batch, under a message id derived from (batch, settlement).
 *
 * No web process up: the row waits, and the first web process to start runs it.
 */

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

const batchKind: WakeupKind<WakeupRow> = {
  table: "batch_wakeups",
  due: sql`true`,
  returning: sql`w.id, w.batch_id, w.thread_id, w.user_id, w.settlement_seq, w.settled_status, w.attempts`,
  report: batchReport,
};

/**
 * Claims up to `limit` due wake-ups for `owner`, fairly (lead-wakeup.ts: round-robin over the
 * users with due rows, each at most `perUser` running, none in a thread whose wake-up runs).
 */
export function claimWakeups(
  db: Db,
  owner: string,
  options: { limit?: number; perUser?: number; leaseSeconds?: number } = {},
): Promise<WakeupRow[]> {
  return claimDue(db, batchKind, owner, options);
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
  const pilot = isPilotPause(n);
  const ran = n.succeeded + n.failed + n.cancelled;
  const lines = [
    pilot
      ? `[Automatic notice, not a user message] Durable batch ${n.batch_id} (sub-agent ${n.subagent}) paused after its pilot: ` +
        `its first ${ran} items ran, and the other ${n.total - ran} wait until the user resumes it.`
      : `[Automatic notice, not a user message] Durable batch ${n.batch_id} (sub-agent ${n.subagent}) ${n.status}.`,
    `Items: ${n.total} total, ${n.succeeded} succeeded, ${n.failed} failed, ${n.cancelled} cancelled.`,
    `Usage: ${n.usage.input_tokens} input + ${n.usage.output_tokens} output tokens, cost $${n.cost_usd.toFixed(4)}.`,
  ];
  const projection = pilot ? projectFromPilot({ total: n.total, succeeded: n.succeeded, failed: n.failed, costUsd: n.cost_usd }) : null;
  if (projection) lines.push(`${projectionSentence(n.total, projection)} Tell the user this projection: it comes from the pilot's real usage.`);
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
    pilot
      ? "Read the pilot's results with batch_results(batch_id, status?, verdict?, cursor?, limit?) as needed, then tell the user " +
          "in a short message how the pilot went and that resuming the batch in the batch panel runs the rest. Do not resume or resubmit the batch."
      : "Read results with batch_results(batch_id, status?, verdict?, cursor?, limit?) as needed, then tell the user in a short " +
          "message what the batch produced and what (if anything) needs their attention. Do not resubmit the batch.",
  );
  return lines.join("\n");
}

/** What a settled batch's wake-up reports: the summary, or nothing when the batch is gone with its thread. */
async function batchReport(db: Db, row: WakeupRow): Promise<WakeupReport | undefined> {
  const [batch] = await db.select().from(subagentBatches).where(eq(subagentBatches.id, row.batch_id));
  if (!batch) return undefined;
  const notice = await buildWakeupNotice(db, batch, row.settled_status, row.settlement_seq);
  const settled =
    `Batch ${row.batch_id} ${isPilotPause(notice) ? "paused after its pilot" : row.settled_status} (${batch.succeededCount} succeeded, ` +
    `${batch.failedCount} failed, ${batch.cancelledCount} cancelled of ${batch.total})`;
  const elsewhere = "Its results are in the batch panel and in results.jsonl.";
  return {
    messageId: wakeupMessageId(row.batch_id, row.settlement_seq),
    // The facts ride along the text, so the simulator answers from them (and never takes the test
    // directives that item errors quote as its own).
    text: wakeupNoticeText(notice),
    providerMetadata: noticeOptions(notice),
    metadata: { trigger: "batch_settled", batch_id: row.batch_id },
    refused: (why) => `${settled}, but I did not summarize it: ${why}. ${elsewhere}`,
    gaveUp: (error) => `${settled}, but I could not produce a summary of it: ${error}. ${elsewhere}`,
  };
}

/** Claims and runs one due wake-up. Returns false when none was due. */
export async function runOneWakeup(options: WakeupOptions): Promise<boolean> {
  const row = await claimWakeup(options.db, options.owner);
  if (!row) return false;
  await runClaimedWakeup(options, row);
  return true;
}

/** Runs a claimed wake-up (lead-wakeup.ts). */
export function runClaimedWakeup(options: WakeupOptions, row: WakeupRow): Promise<void> {
  return runClaimed(options, batchKind, row);
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
  // Two wake-ups of one thread claimed here (of either kind) run one after the other, in claim order.
  const threadTail = new Map<string, Promise<void>>();
  const inThreadOrder = <Row extends ClaimedWakeup>(kind: WakeupKind<Row>) => (row: Row) => {
    const run = (threadTail.get(row.thread_id) ?? Promise.resolve()).then(() => runClaimed(options, kind, row));
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
    inThreadOrder(batchKind),
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
    (free) => claimDue(options.db, childWakeups, options.owner, { limit: free }),
    inThreadOrder(childWakeups),
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
