import { sql } from "drizzle-orm";
import type { BackgroundReceipt, SettledChild } from "@/lib/api/subagents";
import type { Db, DbOrTx } from "@/server/db/client";
import { storableJson } from "@/server/db/storable";
import { childWakeups } from "@/server/db/schema";
import { AbortReason, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { INSTANCE_ID } from "@/server/runtime/instance";
import { childRunFields, type RunSubagentOptions } from "./executor";
import { createRun, finishRun, INTERRUPTED_MESSAGE } from "./runs";

/**
 * Background delegation: `task` / `agent_swarm` with `background: true`. The call's child run
 * rows (pending) and its `child_wakeups` row are written in one transaction before the tool
 * answers `{ background: true, run_ids }`; the children then run in this process, under the
 * same admission as any child, while the lead's response ends. When the call's work is over the
 * row is settled with what the children produced, and a web process wakes the lead
 * (server/chat/children-wakeup.ts). A process that dies leaves the row unsettled: any other
 * process that sees its owner stop heartbeating marks the children interrupted and settles it.
 *
 * Stop: the job's controller follows the lead's (Stop while the response streams), and
 * abortBackground stops it later (Stop of the lead run or of a task's child, from any process,
 * arrives as a `stop:<run id>` notification the web runner forwards here).
 */

/** Characters of one child's answer the wake-up carries. */
export const CHILD_RESULT_CHARS = 4_000;
/** An owner silent this long (web processes heartbeat every 2 s) no longer runs its children. */
export const OWNER_SILENT_SECONDS = 20;

interface Job {
  leadRunId: string;
  tool: "task" | "agent_swarm";
  runIds: string[];
  controller: AbortController;
}

const globalForJobs = globalThis as unknown as { __flotillaBackgroundJobs?: Set<Job> };
function jobs(): Set<Job> {
  globalForJobs.__flotillaBackgroundJobs ??= new Set();
  return globalForJobs.__flotillaBackgroundJobs;
}

/**
 * Stops the background calls of a lead run (or the background task whose child this is) running
 * in this process. True when one was found. The children's own rows are finalized by runSubagent.
 */
export function abortBackground(runId: string, reason: unknown = new AbortReason("stopped", "stopped by the user")): boolean {
  let found = false;
  for (const job of jobs()) {
    if (job.leadRunId !== runId && !(job.tool === "task" && job.runIds.includes(runId))) continue;
    found = true;
    if (!job.controller.signal.aborted) job.controller.abort(reason);
  }
  return found;
}

/** Background calls still running in this process (tests, shutdown). */
export function backgroundJobCount(): number {
  return jobs().size;
}

const uuidArray = (ids: string[]) => sql`string_to_array(${ids.join(",")}, ',')::uuid[]`;

const clip = (text: string | null | undefined, max: number) =>
  !text ? null : text.length > max ? `${text.slice(0, max - 1)}…` : text;

/** The children as their rows say (after a failure or a restart): status, answer, error. */
export async function settledChildrenOf(db: DbOrTx, runIds: string[]): Promise<SettledChild[]> {
  if (runIds.length === 0) return [];
  const rows = await db.execute<{ id: string; definition: string; status: string; result: string | null; error: string | null }>(sql`
    select id, definition, status, result, error from agent_runs where id = any(${uuidArray(runIds)})`);
  const byId = new Map(rows.map((r) => [r.id, r]));
  return runIds.map((id) => {
    const r = byId.get(id);
    return {
      run_id: id,
      definition: r?.definition ?? "unknown",
      status: r?.status ?? "unknown",
      result: clip(r?.result, CHILD_RESULT_CHARS),
      error: clip(r?.error, CHILD_RESULT_CHARS),
    };
  });
}

export function settledChild(c: Omit<SettledChild, "result" | "error"> & { result?: string | null; error?: string | null }): SettledChild {
  return { ...c, result: clip(c.result, CHILD_RESULT_CHARS), error: clip(c.error, CHILD_RESULT_CHARS) };
}

async function settle(db: Db, wakeupId: number, children: SettledChild[]): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await db.execute(sql`
        update ${childWakeups} set settled_at = now(), result = ${storableJson({ children })}::jsonb
         where id = ${wakeupId} and settled_at is null`);
      return;
    } catch (err) {
      if (attempt >= 5) {
        log.error({ err, child_wakeup_id: wakeupId }, "could not settle a background call; the lead will not be woken for it");
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 500 * attempt));
    }
  }
}

export interface BackgroundCall {
  userId: string;
  threadId: string;
  leadRunId: string;
  toolCallId: string;
  tool: "task" | "agent_swarm";
  /** One per child, in order: their pending rows are created before the answer. */
  children: Omit<RunSubagentOptions, "signal">[];
  /** The lead's signal: Stop while the response runs stops the children too. */
  leadSignal: AbortSignal;
  /** Runs the children (each child's first run takes its id from runIds) and says how each ended. */
  run: (signal: AbortSignal, runIds: string[]) => Promise<SettledChild[]>;
  /** Called once the work is over, settled or not (release what the call held). */
  onEnd?: () => void;
}

/** Writes the call's rows, starts its children in this process and answers the receipt at once. */
export async function startBackground(db: Db, call: BackgroundCall): Promise<BackgroundReceipt> {
  const { runIds, wakeupId } = await db.transaction(async (tx) => {
    const ids: string[] = [];
    for (const child of call.children) ids.push((await createRun(tx, { ...childRunFields(child), status: "pending" })).id);
    const [row] = await tx
      .insert(childWakeups)
      .values({
        threadId: call.threadId,
        userId: call.userId,
        leadRunId: call.leadRunId,
        toolCallId: call.toolCallId,
        tool: call.tool,
        runIds: ids,
        ownerInstance: INSTANCE_ID,
      })
      .returning({ id: childWakeups.id });
    return { runIds: ids, wakeupId: row!.id };
  });

  const controller = new AbortController();
  const onLeadAbort = () => controller.abort(call.leadSignal.reason ?? new AbortReason("stopped", "stopped by the user"));
  if (call.leadSignal.aborted) onLeadAbort();
  else call.leadSignal.addEventListener("abort", onLeadAbort, { once: true });
  const job: Job = { leadRunId: call.leadRunId, tool: call.tool, runIds, controller };
  jobs().add(job);
  const jlog = log.child({ run_id: call.leadRunId, tool_call_id: call.toolCallId, child_wakeup_id: wakeupId });

  void (async () => {
    let children: SettledChild[] | undefined;
    try {
      children = await call.run(controller.signal, runIds);
    } catch (err) {
      jlog.warn({ err }, "background call failed");
    }
    try {
      // A child the call never started (stopped first) must not stay pending.
      for (const runId of runIds)
        await finishRun(db, { runId, status: "cancelled", stopReason: "stopped", error: errorText(controller.signal.reason ?? "cancelled before it started") });
      children ??= await settledChildrenOf(db, runIds);
    } catch (err) {
      jlog.warn({ err }, "could not read the background children's outcome");
    }
    call.leadSignal.removeEventListener("abort", onLeadAbort);
    jobs().delete(job);
    call.onEnd?.();
    await settle(db, wakeupId, children ?? runIds.map((run_id) => settledChild({ run_id, definition: "unknown", status: "unknown" })));
    jlog.info({ run_ids: runIds }, "background call settled");
  })();

  return { background: true, run_ids: runIds };
}

/**
 * Background calls whose process is gone (its heartbeat silent for OWNER_SILENT_SECONDS, or
 * stopped): their unfinished runs end `interrupted` (not restarted) and the call is settled, so
 * the lead wakes once with that. Exactly once whichever process runs it (row lock, skip locked).
 */
export async function recoverBackgroundCalls(db: Db, options: { silentSeconds?: number; limit?: number } = {}): Promise<number> {
  const silent = options.silentSeconds ?? OWNER_SILENT_SECONDS;
  return db.transaction(async (tx) => {
    const rows = await tx.execute<{ id: number; lead_run_id: string; run_ids: string[]; owner_instance: string }>(sql`
      select w.id, w.lead_run_id, w.run_ids::text[] as run_ids, w.owner_instance from ${childWakeups} w
       where w.settled_at is null and w.owner_instance <> ${INSTANCE_ID}
         and not exists (select 1 from worker_heartbeats h
                          where h.id = w.owner_instance and h.stopped_at is null
                            and h.last_heartbeat_at > now() - make_interval(secs => ${silent}))
       order by w.id limit ${options.limit ?? 20}
       for update skip locked`);
    for (const row of rows) {
      // The children, their retries and anything they delegated: every run of that lead run the
      // dead process held, the lead run too when it died mid-response (else its thread's stream
      // lock, held until that run is final, would keep the wake-up waiting).
      const active = await tx.execute<{ id: string }>(sql`
        select id from agent_runs
         where (id = ${row.lead_run_id} or root_run_id = ${row.lead_run_id} or id = any(${uuidArray(row.run_ids)}))
           and owner_instance is not distinct from ${row.owner_instance} and status in ('pending', 'running')`);
      for (const { id } of active)
        await finishRun(tx, { runId: id, status: "interrupted", stopReason: "interrupted", error: INTERRUPTED_MESSAGE });
      const children = await settledChildrenOf(tx, row.run_ids);
      await tx.execute(sql`
        update ${childWakeups} set settled_at = now(), interrupted = true, result = ${storableJson({ children })}::jsonb
         where id = ${row.id}`);
      log.warn({ child_wakeup_id: row.id, owner: row.owner_instance, interrupted: active.length }, "background children of a gone process marked interrupted");
    }
    return rows.length;
  });
}
