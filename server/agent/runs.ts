import { and, asc, desc, eq, inArray, lt, sql } from "drizzle-orm";
import type { FlotillaConfig } from "@/lib/config";
import type { RunDetail, RunProjection, ToolCallRecord } from "@/lib/api/runs";
import { type SubagentUsage, tokenCount } from "@/lib/api/subagents";
import { getConfig } from "@/server/config/load";
import { type Db, type DbOrTx, driverOf } from "@/server/db/client";
import { storable, storableJson, storableText } from "@/server/db/storable";
import { agentRuns, type RUN_KINDS, type RunStatus, runEvents } from "@/server/db/schema";
import { AbortReason, notFound } from "@/server/errors";
import { costUsd, findCatalogEntry } from "@/server/models/catalog";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { abortLiveRun, getLiveRun } from "@/server/runtime/run-registry";

/**
 * The agent_runs repository: every write of a run row goes through here. Functions take the
 * database first and one object argument; reads are owner-scoped. Prompts, results, errors,
 * transcripts and tool calls are written storable (server/db/storable.ts).
 */

export type RunKind = (typeof RUN_KINDS)[number];
export type RunRow = typeof agentRuns.$inferSelect;
export type TerminalStatus = Exclude<RunStatus, "pending" | "running">;

export const ACTIVE_STATUSES = ["pending", "running"] as const satisfies readonly RunStatus[];

export const INTERRUPTED_MESSAGE =
  "Interrupted: the server restarted while this run was active. It was not restarted automatically; " +
  "work it had started may be partially done and needs checking.";

export type NewRun = {
  /** A run id chosen by the caller (batch items name their run before the row exists). */
  id?: string;
  userId: string;
  threadId?: string | null;
  parentRunId?: string | null;
  rootRunId?: string | null;
  retryOfRunId?: string | null;
  resumedFromRunId?: string | null;
  kind: RunKind;
  definition: string;
  model: string;
  prompt?: string | null;
  toolCallId?: string | null;
  depth?: number;
  /** Lead runs start running at once; sub-agent runs start pending until they hold a slot. */
  status?: "pending" | "running";
  createdAt?: Date;
};

/** A run row's values, owned by this instance (createRun; a statement that inserts it with more, e.g. createLeadRun). */
export function runValues(args: NewRun) {
  const status = args.status ?? "pending";
  return {
    ...(args.id ? { id: args.id } : {}),
    ...(args.createdAt ? { createdAt: args.createdAt } : {}),
    userId: args.userId,
    threadId: args.threadId ?? null,
    parentRunId: args.parentRunId ?? null,
    rootRunId: args.rootRunId ?? null,
    retryOfRunId: args.retryOfRunId ?? null,
    resumedFromRunId: args.resumedFromRunId ?? null,
    kind: args.kind,
    definition: args.definition,
    model: args.model,
    prompt: storableText(args.prompt) ?? null,
    toolCallId: args.toolCallId ?? null,
    depth: args.depth ?? 0,
    status,
    startedAt: status === "running" ? sql`now()` : null,
    ownerInstance: INSTANCE_ID,
  };
}

export async function createRun(db: DbOrTx, args: NewRun): Promise<RunRow> {
  const [row] = await db.insert(agentRuns).values(runValues(args)).returning();
  return row;
}

/** pending → running, only once a slot is really held. False when the row is no longer pending (stopped meanwhile). */
export async function markRunning(db: DbOrTx, args: { runId: string }): Promise<boolean> {
  const rows = await db
    .update(agentRuns)
    .set({ status: "running", startedAt: sql`now()`, ownerInstance: INSTANCE_ID })
    .where(and(eq(agentRuns.id, args.runId), eq(agentRuns.status, "pending")))
    .returning({ id: agentRuns.id });
  return rows.length === 1;
}

/**
 * The one completion path: moves an active row to a terminal status once. A row that is
 * already terminal is left as it is (false), so a late finish cannot overwrite a stop or a
 * restart recovery.
 */
export async function finishRun(
  db: DbOrTx,
  args: {
    runId: string;
    status: TerminalStatus;
    stopReason?: string | null;
    result?: string | null;
    error?: string | null;
    usage?: SubagentUsage;
    transcript?: unknown[] | null;
    toolCalls?: ToolCallRecord[];
    model?: string;
  },
): Promise<boolean> {
  const rows = await db
    .update(agentRuns)
    .set({
      status: args.status,
      stopReason: args.stopReason ?? null,
      result: storableText(args.result) ?? null,
      error: storableText(args.error) ?? null,
      ...(args.usage
        ? {
            inputTokens: args.usage.inputTokens,
            outputTokens: args.usage.outputTokens,
            cachedInputTokens: tokenCount(args.usage.cachedInputTokens),
            cacheWriteTokens: tokenCount(args.usage.cacheWriteTokens),
          }
        : {}),
      ...(args.transcript !== undefined ? { transcript: storable(args.transcript) } : {}),
      ...(args.toolCalls !== undefined ? { toolCalls: storable(args.toolCalls), toolCallCount: args.toolCalls.length } : {}),
      ...(args.model ? { model: args.model } : {}),
      finishedAt: sql`now()`,
    })
    .where(and(eq(agentRuns.id, args.runId), inArray(agentRuns.status, [...ACTIVE_STATUSES])))
    .returning({ id: agentRuns.id });
  return rows.length === 1;
}

/**
 * A batch item's run, written once when it ends (no pending and running rows before it): the
 * item row is the durable record of the attempt while it runs. Committed asynchronously: the
 * worker's settle, a synchronous commit issued after this one, flushes the WAL up to and past
 * this row, so a crash can lose the run row only together with its unsettled item, which is
 * then run again under a new lease.
 */
export async function insertFinishedRun(db: Db, args: FinishedRunArgs): Promise<void> {
  return writeFinishedRunRow(db, finishedRunRow(args));
}

/** insertFinishedRun of a row already built (finishedRunRow). */
export function writeFinishedRunRow(db: Db, row: FinishedRunRow): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let queue = finishedRunQueues.get(db);
    if (!queue) {
      const batch: FinishedRunQueue = [];
      queue = batch;
      finishedRunQueues.set(db, batch);
      // Items that end in the same tick share one statement (one commit).
      setImmediate(() => {
        finishedRunQueues.delete(db);
        void writeFinishedRuns(db, batch);
      });
    }
    queue.push({ row, resolve, reject });
  });
}

export interface FinishedRunArgs {
    id: string;
    userId: string;
    threadId?: string | null;
    kind: RunKind;
    definition: string;
    model: string;
    prompt?: string | null;
    depth?: number;
    createdAt: Date;
    startedAt: Date | null;
    status: TerminalStatus;
    stopReason?: string | null;
    result?: string | null;
    error?: string | null;
    usage: SubagentUsage;
    transcript?: unknown[] | null;
    toolCalls?: ToolCallRecord[];
}

/**
 * A finished run as run-rows.sql takes it (column names as the table spells them). The batch
 * worker hands these to its settle, which writes them in the same round trip as the items.
 */
export type FinishedRunRow = Record<string, unknown>;

export function finishedRunRow(args: FinishedRunArgs): FinishedRunRow {
  return {
    id: args.id,
    user_id: args.userId,
    thread_id: args.threadId ?? null,
    kind: args.kind,
    definition: args.definition,
    model: args.model,
    prompt: args.prompt ?? null,
    depth: args.depth ?? 0,
    status: args.status,
    stop_reason: args.stopReason ?? null,
    result: args.result ?? null,
    error: args.error ?? null,
    input_tokens: args.usage.inputTokens,
    output_tokens: args.usage.outputTokens,
    cached_input_tokens: tokenCount(args.usage.cachedInputTokens),
    cache_write_tokens: tokenCount(args.usage.cacheWriteTokens),
    transcript: args.transcript ?? null,
    tool_calls: args.toolCalls ?? null,
    tool_call_count: args.toolCalls?.length ?? 0,
    owner_instance: INSTANCE_ID,
    created_at: args.createdAt,
    started_at: args.startedAt,
    finished_at: new Date(),
  };
}

type FinishedRunQueue = Array<{ row: FinishedRunRow; resolve(): void; reject(err: unknown): void }>;

const finishedRunQueues = new WeakMap<Db, FinishedRunQueue>();

async function writeFinishedRuns(db: Db, batch: FinishedRunQueue): Promise<void> {
  // A prepared call of run-rows.sql (asynchronous commit inside), not a drizzle insert: see there.
  const write = async (rows: FinishedRunRow[]) => {
    await driverOf(db)`select flotilla_insert_finished_runs(${storableJson(rows)}::text::jsonb)`;
  };
  try {
    await write(batch.map((q) => q.row));
    for (const q of batch) q.resolve();
  } catch (err) {
    if (batch.length === 1) return batch[0]!.reject(err);
    // One bad row (its thread deleted meanwhile) must not fail the runs written with it.
    for (const q of batch) await write([q.row]).then(q.resolve, q.reject);
  }
}


export async function getRunForUser(
  db: DbOrTx,
  args: { userId: string; threadId: string; runId: string },
): Promise<RunRow> {
  const [row] = await db
    .select()
    .from(agentRuns)
    .where(and(eq(agentRuns.id, args.runId), eq(agentRuns.userId, args.userId), eq(agentRuns.threadId, args.threadId)));
  if (!row) throw notFound("run");
  return row;
}

/** Runs of a thread, oldest first (the transcript and the cards read them). */
export async function listRunsForThread(
  db: DbOrTx,
  args: { userId: string; threadId: string; limit?: number },
): Promise<RunRow[]> {
  return db
    .select()
    .from(agentRuns)
    .where(and(eq(agentRuns.userId, args.userId), eq(agentRuns.threadId, args.threadId)))
    .orderBy(asc(agentRuns.createdAt), asc(agentRuns.id))
    .limit(Math.min(Math.max(args.limit ?? 500, 1), 2000));
}

/**
 * Every descendant of a run in the same thread and owner, following parent links. Durable
 * batch items are not part of a conversational tree: they are neither returned nor followed.
 */
export async function listDescendants(
  db: DbOrTx,
  args: { userId: string; threadId: string; runId: string },
): Promise<Pick<RunRow, "id" | "status" | "ownerInstance" | "kind" | "depth">[]> {
  const rows = await db.execute<{ id: string; status: RunStatus; owner_instance: string | null; kind: RunKind; depth: number }>(sql`
    with recursive tree as (
      select r.id, r.status, r.owner_instance, r.kind, r.depth
        from agent_runs r
       where r.parent_run_id = ${args.runId} and r.user_id = ${args.userId} and r.thread_id = ${args.threadId}
         and r.kind <> 'batch_item'
      union
      select c.id, c.status, c.owner_instance, c.kind, c.depth
        from agent_runs c join tree t on c.parent_run_id = t.id
       where c.user_id = ${args.userId} and c.thread_id = ${args.threadId} and c.kind <> 'batch_item'
    )
    select id, status, owner_instance, kind, depth from tree order by depth desc
  `);
  return rows.map((r) => ({ id: r.id, status: r.status, ownerInstance: r.owner_instance, kind: r.kind, depth: r.depth }));
}

export interface StopReport {
  /** Descendants that were active and are now cancelled (aborted and finalized, or cancelled before starting). */
  stopped: number;
  /** Descendants still active: running in another process, or not finalized within the wait. */
  failedToStop: number;
  /** Whether the run itself was live in this process and got aborted. */
  runAborted: boolean;
}

/**
 * Stops a run and every descendant (queued ones included): live runs of this process are
 * aborted through the in-process registry and awaited (bounded); rows that have not started
 * and are not live here are cancelled in the database. Never touches other threads or
 * durable batch items.
 */
export async function stopRunTree(
  db: DbOrTx,
  args: { userId: string; threadId: string; runId: string; waitMs?: number; reason?: string },
): Promise<StopReport> {
  await getRunForUser(db, args);
  const reason = new AbortReason("stopped", args.reason ?? "stopped by the user");
  // Snapshot the active tree before aborting anything: aborts cascade through signals and
  // rows would otherwise turn terminal before they are counted.
  const descendants = await listDescendants(db, args);
  const active = descendants.filter((d) => d.status === "pending" || d.status === "running");
  const runAborted = abortLiveRun(args.runId, reason);
  const waits: { id: string; done: Promise<void> }[] = [];
  const orphanPending: string[] = [];
  let failedToStop = 0;
  for (const run of active) {
    const live = getLiveRun(run.id);
    if (live) {
      abortLiveRun(run.id, reason);
      waits.push({ id: run.id, done: live.done });
    } else if (run.status === "pending") orphanPending.push(run.id);
    else failedToStop++;
  }
  let stopped = 0;
  if (orphanPending.length) {
    const rows = await db
      .update(agentRuns)
      .set({ status: "cancelled", stopReason: "stopped", error: reason.message, finishedAt: sql`now()` })
      .where(and(inArray(agentRuns.id, orphanPending), eq(agentRuns.status, "pending")))
      .returning({ id: agentRuns.id });
    stopped += rows.length;
    // A row that left pending meanwhile started somewhere else: it did not stop.
    failedToStop += orphanPending.length - rows.length;
  }
  if (waits.length) {
    const waitMs = args.waitMs ?? 5_000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), waitMs);
    });
    await Promise.all(waits.map((w) => Promise.race([w.done, deadline])));
    clearTimeout(timer);
    // Judge by the final rows: a run that finished on its own in the meantime was not stopped.
    const rows = await db
      .select({ id: agentRuns.id, status: agentRuns.status })
      .from(agentRuns)
      .where(
        inArray(
          agentRuns.id,
          waits.map((w) => w.id),
        ),
      );
    for (const row of rows) {
      if (row.status === "cancelled") stopped++;
      else if (row.status === "pending" || row.status === "running") failedToStop++;
    }
  }
  // Kept on the run so the transcript can show the outcome after a reload.
  await db.insert(runEvents).values({
    runId: args.runId,
    type: "stop",
    data: { stopped, failed_to_stop: failedToStop, run_aborted: runAborted },
  });
  return { stopped, failedToStop, runAborted };
}

/** The outcome of the latest Stop of a run, if it was ever stopped. */
export async function getStopReport(
  db: DbOrTx,
  args: { runId: string },
): Promise<{ stopped: number; failed_to_stop: number } | null> {
  const [event] = await db
    .select({ data: runEvents.data })
    .from(runEvents)
    .where(and(eq(runEvents.runId, args.runId), eq(runEvents.type, "stop")))
    .orderBy(desc(runEvents.id))
    .limit(1);
  if (!event) return null;
  return { stopped: Number(event.data.stopped ?? 0), failed_to_stop: Number(event.data.failed_to_stop ?? 0) };
}

/**
 * Restart recovery: runs left pending or running by a process that is gone are finalized
 * as `interrupted` through finishRun. A run is left alone when it was created by this
 * process, after `startedBefore`, or when its owner still heartbeats. Durable batch items
 * are recovered by their leases instead.
 */
export async function recoverInterruptedRuns(
  db: DbOrTx,
  args: { instanceId?: string; startedBefore: Date; liveWithinSeconds?: number },
): Promise<{ interrupted: string[] }> {
  const instanceId = args.instanceId ?? INSTANCE_ID;
  const within = args.liveWithinSeconds ?? 60;
  const candidates = await db
    .select({ id: agentRuns.id })
    .from(agentRuns)
    .where(
      and(
        inArray(agentRuns.status, [...ACTIVE_STATUSES]),
        sql`${agentRuns.kind} <> 'batch_item'`,
        sql`${agentRuns.ownerInstance} is distinct from ${instanceId}`,
        lt(agentRuns.createdAt, args.startedBefore),
        sql`not exists (select 1 from worker_heartbeats h
                         where h.id = ${agentRuns.ownerInstance} and h.stopped_at is null
                           and h.last_heartbeat_at > now() - make_interval(secs => ${within}))`,
      ),
    );
  const interrupted: string[] = [];
  for (const { id } of candidates) {
    const ok = await finishRun(db, { runId: id, status: "interrupted", stopReason: "interrupted", error: INTERRUPTED_MESSAGE });
    if (ok) interrupted.push(id);
  }
  return { interrupted };
}

/** US dollars for a run's usage at its catalog entry's prices (0 when the entry is gone or unpriced). */
export function runCostUsd(
  row: Pick<RunRow, "model" | "inputTokens" | "outputTokens"> & Partial<Pick<RunRow, "cachedInputTokens" | "cacheWriteTokens">>,
  config: FlotillaConfig = getConfig(),
): number {
  const entry = findCatalogEntry(config, row.model);
  return entry ? costUsd(entry, row) : 0;
}

/** The API projection of a run row (lib/api/runs.ts). */
export function toRunProjection(row: RunRow, now: Date = new Date(), config: FlotillaConfig = getConfig()): RunProjection {
  const started = row.startedAt?.getTime();
  const end = row.finishedAt?.getTime() ?? (row.status === "running" ? now.getTime() : undefined);
  return {
    id: row.id,
    thread_id: row.threadId,
    parent_run_id: row.parentRunId,
    root_run_id: row.rootRunId,
    kind: row.kind,
    definition: row.definition,
    model: row.model,
    tool_call_id: row.toolCallId,
    depth: row.depth,
    status: row.status,
    stop_reason: row.stopReason,
    error: row.error,
    usage: {
      input_tokens: row.inputTokens,
      output_tokens: row.outputTokens,
      cached_input_tokens: row.cachedInputTokens,
      cache_write_tokens: row.cacheWriteTokens,
    },
    created_at: row.createdAt.toISOString(),
    started_at: row.startedAt?.toISOString() ?? null,
    finished_at: row.finishedAt?.toISOString() ?? null,
    duration_ms: started !== undefined && end !== undefined ? Math.max(0, end - started) : null,
    tool_calls: row.toolCallCount,
    cost_usd: runCostUsd(row, config),
  };
}

/** The run detail: the projection, its latest Stop's outcome and its tool calls. */
export function toRunDetail(row: RunRow, stopReport: RunDetail["stop_report"], config: FlotillaConfig = getConfig()): RunDetail {
  return { ...toRunProjection(row, new Date(), config), stop_report: stopReport, tool_call_list: row.toolCalls ?? [] };
}
