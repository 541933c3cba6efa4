import type { ModelMessage, UIMessageStreamWriter } from "ai";
import type { FlotillaConfig } from "@/lib/config";
import type { Db } from "@/server/db/client";
import { AppError, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { classifyModelError } from "@/server/runtime/model-errors";
import type { ResolvedModel } from "@/server/models/types";
import { getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import {
  type CapacityController,
  CapacityRejectedError,
  type CapacityStats,
  CapacityTimeoutError,
} from "@/server/runtime/capacity";
import { settledChild, startBackground } from "../background";
import { runSubagent, type SubagentRunResult } from "../executor";
import { getSubagentDefinition, resolveSubagent } from "../registry";
import { nestedDelegation } from "../tools/task";
import { type Clock, type SwarmTimings, systemClock } from "./clock";
import { parseSwarmInput } from "./input";
import { claimResumeSources, preflightResumes, retryHistory } from "./resume";
import { type AttemptOutcome, type AttemptRequest, type ItemSettlement, runSchedule } from "./scheduler";
import { SwarmTrace } from "./trace";
import type { SwarmAggregate, SwarmItemRow, SwarmResult } from "@/lib/api/swarm";
import type { BackgroundReceipt } from "@/lib/api/subagents";

/**
 * One agent_swarm call: validate everything, preflight resumes, then run every item as an
 * ordinary sub-agent run (kind "swarm_child", parent = the lead run) through the same
 * executor and process capacity as `task`, under the local scheduler's backpressure.
 * The result is an ordered, bounded projection over those child runs.
 */

export interface SwarmContext {
  db: Db;
  config: FlotillaConfig;
  userId: string;
  threadId: string;
  /** The lead run that called the tool (parent of every child). */
  leadRunId: string;
  /** Root of the delegation tree; defaults to the lead run. */
  rootRunId?: string;
  /** Depth of the caller (0 for the lead). */
  depth?: number;
  model: ResolvedModel;
  /** The lead's stop signal: cancels the whole swarm. */
  signal: AbortSignal;
  toolCallId: string;
  writer?: UIMessageStreamWriter;
  runtime?: SubagentRuntime;
  timings?: Partial<SwarmTimings>;
  clock?: Clock;
}

/** Total characters of child answers one result may carry, spread over its rows. */
export const SUMMARY_BUDGET_CHARS = 24_000;
export const SUMMARY_MAX_CHARS = 2_000;
export const SUMMARY_MIN_CHARS = 300;
export const ERROR_MAX_CHARS = 300;

/** Lead runs with a swarm in flight (one swarm at a time per response). */
const activeSwarms = new Set<string>();

interface Entry {
  item_id: string;
  profile: string;
  prompt: string;
  history?: ModelMessage[];
  resumedFrom: string | null;
}

interface Outcome extends AttemptOutcome {
  text: string;
  error: string | null;
}

const bound = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);


function isAbort(err: unknown, signal: AbortSignal): boolean {
  return signal.aborted || (err instanceof Error && err.name === "AbortError");
}

/** Runs an agent_swarm call to the end and returns its result (`background` is ignored). */
export function runSwarm(ctx: SwarmContext, rawInput: unknown): Promise<SwarmResult> {
  // Without allowBackground the call never answers a receipt.
  return swarmCall(ctx, rawInput, false) as Promise<SwarmResult>;
}

/**
 * The agent_swarm tool: runSwarm, or with `background: true` in the input, the receipt once the
 * children's rows exist, the items running after the response (server/agent/background.ts).
 */
export function runSwarmCall(ctx: SwarmContext, rawInput: unknown): Promise<SwarmResult | BackgroundReceipt> {
  return swarmCall(ctx, rawInput, true);
}

async function swarmCall(ctx: SwarmContext, rawInput: unknown, allowBackground: boolean): Promise<SwarmResult | BackgroundReceipt> {
  const clock = ctx.clock ?? systemClock;
  const startedAt = clock.now();
  const logger = log.child({ run_id: ctx.leadRunId, tool_call_id: ctx.toolCallId, tool: "agent_swarm" });
  const runtime = ctx.runtime ?? getSubagentRuntime();
  const trace = new SwarmTrace({
    db: ctx.db,
    leadRunId: ctx.leadRunId,
    toolCallId: ctx.toolCallId,
    writer: ctx.writer,
    now: () => clock.now(),
    startedAt,
    logger,
  });
  const isKnownProfile = (name: string) => {
    try {
      getSubagentDefinition(name, ctx.config);
      return true;
    } catch {
      return false;
    }
  };

  // Admission: everything is checked before any child starts; a refusal starts nothing.
  let entries: Entry[];
  let concurrency: number;
  let releaseClaims: (() => void) | undefined;
  let admitted = false;
  let background = false;
  try {
    if (!ctx.config.subagents.enabled)
      throw new AppError("forbidden", "sub-agents are disabled on this server (subagents.enabled = false)");
    if (activeSwarms.has(ctx.leadRunId))
      throw new AppError(
        "conflict",
        "another agent_swarm call of this response is still running; put all items into one agent_swarm call",
      );
    activeSwarms.add(ctx.leadRunId);
    admitted = true;
    const plan = parseSwarmInput(rawInput, ctx.config, isKnownProfile);
    const resumes = await preflightResumes(ctx.db, {
      userId: ctx.userId,
      threadId: ctx.threadId,
      modelName: ctx.model.catalogName,
      resumes: plan.resumes,
      isKnownProfile,
    });
    releaseClaims = claimResumeSources(resumes.map((r) => r.source_run_id));
    concurrency = plan.concurrency;
    background = plan.background;
    entries = [
      ...resumes.map((r) => ({
        item_id: r.item_id,
        profile: r.profile,
        prompt: r.prompt,
        history: r.history,
        resumedFrom: r.source_run_id,
      })),
      ...plan.items.map((i) => ({ item_id: i.item_id, profile: i.profile, prompt: i.task, resumedFrom: null })),
    ];
  } catch (err) {
    if (admitted) activeSwarms.delete(ctx.leadRunId);
    if (!(err instanceof AppError)) throw err;
    trace.record("tool_admission_rejected", { reason: err.message });
    await trace.flush();
    logger.info({ reason: err.message }, "agent_swarm call rejected");
    return rejected(err, ctx.config);
  }

  const release = () => {
    releaseClaims?.();
    activeSwarms.delete(ctx.leadRunId);
  };
  // Only the lead delegates in the background.
  if (allowBackground && background && (ctx.depth ?? 0) === 0) {
    try {
      const children = entries.map((entry) => {
        const { definition, model } = resolveSubagent(runtime.config, entry.profile, ctx.model);
        return {
          userId: ctx.userId,
          threadId: ctx.threadId,
          parentRunId: ctx.leadRunId,
          rootRunId: ctx.rootRunId ?? ctx.leadRunId,
          kind: "swarm_child" as const,
          definition,
          prompt: entry.prompt,
          model,
          depth: (ctx.depth ?? 0) + 1,
          toolCallId: ctx.toolCallId,
          resumedFromRunId: entry.resumedFrom ?? undefined,
        };
      });
      return await startBackground(ctx.db, {
        userId: ctx.userId,
        threadId: ctx.threadId,
        leadRunId: ctx.leadRunId,
        toolCallId: ctx.toolCallId,
        tool: "agent_swarm",
        children,
        leadSignal: ctx.signal,
        onEnd: release,
        run: async (signal, runIds) => {
          // The response has ended: no live UI part to write to, the trace goes to run_events only.
          const result = await execute({ signal, writer: undefined }, runIds);
          return result.items.map((row, i) =>
            settledChild({
              run_id: row.child_run_id ?? runIds[i]!,
              item_id: row.item_id,
              definition: row.profile,
              status: row.status,
              result: row.summary,
              error: row.error,
            }),
          );
        },
      });
    } catch (err) {
      release();
      throw err;
    }
  }
  try {
    return await execute({ signal: ctx.signal, writer: ctx.writer });
  } finally {
    release();
  }

  /** Runs every entry; `firstRunIds` are the entries' pending rows made before a background answer. */
  async function execute(
    run: { signal: AbortSignal; writer: UIMessageStreamWriter | undefined },
    firstRunIds?: string[],
  ): Promise<SwarmResult> {
    trace.setWriter(run.writer);
    const rows: SwarmItemRow[] = entries.map((e) => ({
      item_id: e.item_id,
      status: "queued",
      profile: e.profile,
      duration_ms: null,
      failure_class: null,
      summary: null,
      error: null,
      child_run_id: null,
      attempts: 0,
      resumed_from_run_id: e.resumedFrom,
    }));
    const usage = { input_tokens: 0, output_tokens: 0 };
    const summaryMax = Math.max(
      SUMMARY_MIN_CHARS,
      Math.min(SUMMARY_MAX_CHARS, Math.floor(SUMMARY_BUDGET_CHARS / Math.max(1, entries.length))),
    );
    const currentRunId: Array<string | null> = entries.map(() => null);
    const firstStart: Array<number | null> = entries.map(() => null);
    let effective = concurrency;
    let finalStatus: SwarmAggregate["status"] = "running";

    const aggregate = (): SwarmAggregate => {
      const counts = { total: rows.length, queued: 0, running: 0, suspended: 0, completed: 0, failed: 0, cancelled: 0 };
      for (const r of rows) counts[r.status] += 1;
      return {
        status: finalStatus,
        counts,
        started: rows.filter((r) => r.attempts > 0).length,
        concurrency,
        effective_capacity: effective,
        duration_ms: Math.max(0, Math.round(clock.now() - startedAt)),
        usage: { ...usage },
      };
    };
    trace.attach(() => ({ aggregate: aggregate(), items: rows.map((r) => ({ ...r })) }));

    const runAttempt = async (req: AttemptRequest<Entry>): Promise<Outcome> => {
      const entry = req.item;
      const row = rows[req.index];
      currentRunId[req.index] = null;
      // Observe the shared process permit at the moment the child asks for it: if it has to
      // wait behind other runs, that boundary goes into the trace.
      const capacity = observedCapacity(runtime.capacity, (stats) =>
        trace.record("shared_capacity_waiting", {
          item_id: entry.item_id,
          attempt: req.attempt,
          running: stats.running,
          queued: stats.queued,
        }),
      );
      // A retry after a rate limit continues the attempt it retries: same messages, same tool results.
      const replay = req.attempt > 1 && req.retryOfRunId ? await retryHistory(ctx.db, req.retryOfRunId) : undefined;
      const { definition, model } = resolveSubagent(runtime.config, entry.profile, ctx.model);
      const result: SubagentRunResult = await runSubagent(ctx.db, {
        userId: ctx.userId,
        threadId: ctx.threadId,
        parentRunId: ctx.leadRunId,
        rootRunId: ctx.rootRunId ?? ctx.leadRunId,
        kind: "swarm_child",
        definition,
        prompt: entry.prompt,
        model,
        signal: req.signal,
        depth: (ctx.depth ?? 0) + 1,
        toolCallId: ctx.toolCallId,
        history: entry.history,
        replay,
        retryOfRunId: req.retryOfRunId ?? undefined,
        // Only the first attempt is the source's successor; retries link to that attempt.
        resumedFromRunId: req.attempt === 1 && entry.resumedFrom ? entry.resumedFrom : undefined,
        runId: req.attempt === 1 ? firstRunIds?.[req.index] : undefined,
        runtime,
        capacity,
        delegate: nestedDelegation({ db: ctx.db, userId: ctx.userId, threadId: ctx.threadId }),
        onCreated: (id) => {
          currentRunId[req.index] = id;
          row.child_run_id = id;
          trace.publishSoon();
        },
        onStarted: () => {
          trace.record("child_started", {
            item_id: entry.item_id,
            attempt: req.attempt,
            child_run_id: currentRunId[req.index],
          });
        },
      });
      usage.input_tokens += result.usage.inputTokens;
      usage.output_tokens += result.usage.outputTokens;
      const outcome: Outcome =
        result.status === "completed"
          ? { status: "completed", failureClass: null, runId: result.runId, text: result.text, error: null }
          : result.status === "cancelled"
            ? { status: "cancelled", failureClass: null, runId: result.runId, text: "", error: result.error ?? null }
            : {
                status: "failed",
                failureClass: result.status === "timed_out" ? "timeout" : (result.errorClass ?? "unknown"),
                runId: result.runId,
                text: result.text,
                error: result.error ?? result.stopReason ?? "failed",
              };
      trace.record("child_completed", {
        item_id: entry.item_id,
        attempt: req.attempt,
        child_run_id: result.runId,
        status: result.status,
        failure_class: outcome.failureClass ?? null,
        duration_ms: result.durationMs,
      });
      return outcome;
    };

    const onAttemptError = (err: unknown, req: AttemptRequest<Entry>): Outcome => {
      const runId = currentRunId[req.index];
      const base = { runId, text: "", error: bound(errorText(err), ERROR_MAX_CHARS) };
      let outcome: Outcome;
      if (err instanceof CapacityRejectedError) outcome = { ...base, status: "failed", failureClass: "capacity_rejected" };
      else if (err instanceof CapacityTimeoutError) outcome = { ...base, status: "failed", failureClass: "capacity_timeout" };
      else if (isAbort(err, req.signal)) outcome = { ...base, status: "cancelled", failureClass: null };
      else {
        logger.warn({ err, item_id: req.item.item_id }, "swarm child threw");
        outcome = { ...base, status: "failed", failureClass: classifyModelError(err) };
      }
      trace.record("child_completed", {
        item_id: req.item.item_id,
        attempt: req.attempt,
        child_run_id: runId,
        status: outcome.status,
        failure_class: outcome.failureClass ?? null,
      });
      return outcome;
    };

    const lastOutcome: Array<Outcome | null> = entries.map(() => null);
    const finishRow = (index: number, settlement: Pick<ItemSettlement<Outcome>, "status" | "reason" | "attempts" | "firstStartedAt" | "settledAt">) => {
      const row = rows[index];
      const outcome = lastOutcome[index];
      row.status = settlement.status;
      row.attempts = settlement.attempts;
      row.duration_ms =
        settlement.firstStartedAt === null ? null : Math.max(0, Math.round(settlement.settledAt - settlement.firstStartedAt));
      row.child_run_id = outcome?.runId ?? currentRunId[index] ?? row.child_run_id;
      row.summary = outcome?.text ? bound(outcome.text, summaryMax) : null;
      row.failure_class = settlement.status === "failed" ? (outcome?.failureClass ?? "unknown") : null;
      const n = settlement.attempts;
      switch (settlement.reason) {
        case "rate_limit_alone":
          row.error = `rate limited by the provider after ${n} attempt${n === 1 ? "" : "s"}; no other item was left to wait for, so it was not retried again`;
          break;
        case "rate_limit_exhausted":
          row.error = `rate limited by the provider on all ${n} attempts`;
          break;
        case "cancelled_before_start":
          row.error = "cancelled before it started";
          break;
        case "cancelled_while_suspended":
          row.error = "cancelled while waiting to retry after a rate limit";
          break;
        case "cancelled_while_running":
          row.error = "cancelled while running";
          break;
        default:
          row.error = settlement.status === "completed" ? null : outcome?.error ? bound(outcome.error, ERROR_MAX_CHARS) : null;
      }
    };

    const result = await runSchedule<Entry, Outcome>({
      items: entries,
      concurrency,
      signal: run.signal,
      timings: ctx.timings,
      clock,
      runAttempt: async (req) => {
        const outcome = await runAttempt(req);
        lastOutcome[req.index] = outcome;
        return outcome;
      },
      onAttemptError: (err, req) => {
        const outcome = onAttemptError(err, req);
        lastOutcome[req.index] = outcome;
        return outcome;
      },
      onEvent: (event) => {
        switch (event.type) {
          case "item_queued":
            trace.record("item_queued", { item_id: entries[event.index].item_id, attempt: event.attempt });
            break;
          case "item_started": {
            const row = rows[event.index];
            row.status = "running";
            row.attempts = event.attempt;
            firstStart[event.index] ??= clock.now();
            trace.record("item_started", {
              item_id: row.item_id,
              attempt: event.attempt,
              retry_of_run_id: event.retryOfRunId,
              resumed_from_run_id: event.attempt === 1 ? row.resumed_from_run_id : null,
            });
            break;
          }
          case "item_suspended": {
            const row = rows[event.index];
            row.status = "suspended";
            row.failure_class = "rate_limit";
            trace.record("item_suspended", {
              item_id: row.item_id,
              attempt: event.attempt,
              delay_ms: event.delayMs,
              failure_class: "rate_limit",
              child_run_id: event.runId,
            });
            break;
          }
          case "capacity_changed":
            effective = event.effective;
            trace.record("capacity_changed", {
              direction: event.direction,
              effective_capacity: event.effective,
              previous_capacity: event.previous,
            });
            break;
          case "item_settled": {
            // Live row now; the final settlement below writes the same fields.
            finishRow(event.index, {
              status: event.status,
              reason: event.reason,
              attempts: event.attempts,
              firstStartedAt: firstStart[event.index],
              settledAt: clock.now(),
            });
            trace.publishSoon();
            break;
          }
        }
      },
    });

    for (const s of result.settlements) finishRow(s.index, s);
    const agg = aggregate();
    finalStatus = result.cancelled
      ? "cancelled"
      : agg.counts.completed === agg.counts.total
        ? "completed"
        : agg.counts.failed + agg.counts.cancelled === agg.counts.total && agg.counts.completed === 0
          ? "failed"
          : "partial";
    const final: SwarmResult = { aggregate: aggregate(), items: rows.map((r) => ({ ...r })) };
    trace.record("swarm_completed", { aggregate: final.aggregate });
    trace.publish();
    await trace.flush();
    logger.info({ status: finalStatus, counts: final.aggregate.counts }, "agent_swarm settled");
    return final;
  }
}

/**
 * The same process controller, seen through a view whose acquire first notes whether the
 * request will have to wait (saturated or others already queued, under the queue policy).
 */
function observedCapacity(shared: CapacityController, onWait: (stats: CapacityStats) => void): CapacityController {
  const view = Object.create(shared) as CapacityController;
  view.acquire = (options) => {
    const stats = shared.stats();
    if (stats.policy === "queue" && !options?.noQueue && (stats.running >= stats.maxRunning || stats.queued > 0)) onWait(stats);
    return shared.acquire(options);
  };
  return view;
}

function rejected(err: AppError, config: FlotillaConfig): SwarmResult {
  return {
    aggregate: {
      status: "rejected",
      counts: { total: 0, queued: 0, running: 0, suspended: 0, completed: 0, failed: 0, cancelled: 0 },
      started: 0,
      concurrency: config.swarm.default_concurrency,
      effective_capacity: 0,
      duration_ms: 0,
      usage: { input_tokens: 0, output_tokens: 0 },
    },
    items: [],
    rejection: { code: err.code, message: bound(err.message, 4_000) },
  };
}
