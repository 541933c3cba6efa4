import { matchingAs } from "@/server/runtime/pattern-thread";
import { type ModelMessage, type ToolSet, wrapLanguageModel } from "ai";
import { INVALID_USAGE_ERROR, type SubagentRunStatus, type SubagentStatusUpdate, type SubagentUsage } from "@/lib/api/subagents";
import type { Db } from "@/server/db/client";
import { AbortReason, AppError, abortKind, errorText } from "@/server/errors";
import { log } from "@/server/log";
import { traceAgentRun } from "@/server/telemetry";
import { getSubagentRuntime, type SubagentRuntime } from "@/server/runtime/admission";
import { CapacityTimeoutError, isCapacityError } from "@/server/runtime/capacity";
import { classifyModelError, type RunErrorClass } from "@/server/runtime/model-errors";
import { SchemaRefusal } from "@/server/runtime/output-schema";
import { registerLiveRun } from "@/server/runtime/run-registry";
import { ToolCallRecorder } from "@/server/tools";
import type { ApprovalRequest } from "./chat-approvals";
import { RunAdmission } from "./executor/admission";
import { answerWithModel, type ModelOutcome } from "./executor/model-call";
import { type RunEnding, RunRow, runResult, type SettledStatus } from "./executor/settlement";
import { type DurableSteps, durableSteps, stepLeaseLost } from "./executor/steps";
import { askForApproval, childApprovalGate, runToolset } from "./executor/toolset";
import type { DelegatingRun, RunSubagentOptions, SubagentRunResult } from "./executor/types";
import { addStepUsage, NO_USAGE } from "./executor/usage";
import "./prompt-schema";
import { type TypedOutput, typedOutput } from "./structured-output";

/**
 * Runs one sub-agent to completion, in stages (./executor/): admission (the capacity slot and
 * the clock) → the toolset (approval and idempotency wrappers) → the step store (batch items) →
 * the model call (structured output, repair turn) → usage → settlement (the run row, the result).
 * Used by `task`, the swarm and the batch worker (whose items write their row once, at the end).
 */

export { childRunFields } from "./executor/settlement";
export type { DelegatingRun, RunSubagentOptions, SubagentRunResult } from "./executor/types";
export type { ApprovalRequest, RunErrorClass, SubagentRunStatus, SubagentStatusUpdate, SubagentUsage };

export function runSubagent(db: Db, opts: RunSubagentOptions): Promise<SubagentRunResult> {
  const traced = { agent: opts.definition.name, model: opts.model.name, threadId: opts.threadId, runId: opts.runId };
  // Its typed answer's matching jobs wait in its owner's queue (pattern-thread.ts).
  return matchingAs(opts.userId, () => traceAgentRun(traced, () => runSubagentInSpan(db, opts)));
}

async function runSubagentInSpan(db: Db, opts: RunSubagentOptions): Promise<SubagentRunResult> {
  const run = new SubagentRun(db, opts, await RunRow.open(db, opts));
  try {
    const refused = await run.admit();
    if (refused) return refused;
    try {
      return await run.settleOutcome(await run.callModel(await run.toolset()));
    } catch (err) {
      return await run.failed(err);
    }
  } catch (err) {
    if (!isCapacityError(err)) await run.crashed(err);
    throw err;
  } finally {
    run.end();
  }
}

/** Tool groups and models this process lacks fail the run with that class, naming what is missing. */
function unavailableClass(err: unknown): "tool_unavailable" | "model_unavailable" | undefined {
  if (err instanceof AppError && (err.code === "tool_unavailable" || err.code === "model_unavailable")) return err.code;
  return undefined;
}

/** One run's state across its stages; each method is one stage's part of runSubagent. */
class SubagentRun {
  private readonly runtime: SubagentRuntime;
  private readonly depth: number;
  private readonly rootRunId: string;
  // Our own controller: aborted by the caller's signal, by Stop (registry) or by the time limit.
  private readonly controller = new AbortController();
  private readonly unregister: () => void;
  private readonly admission: RunAdmission;
  private readonly recorder = new ToolCallRecorder();
  private usage: SubagentUsage = NO_USAGE;
  private startedAt = 0;
  private journal: DurableSteps | undefined;
  private readonly progress: { transcript: ModelMessage[] } = { transcript: [] };

  constructor(
    private readonly db: Db,
    private readonly opts: RunSubagentOptions,
    private readonly row: RunRow,
  ) {
    this.runtime = opts.runtime ?? getSubagentRuntime();
    this.depth = opts.depth ?? 1;
    this.rootRunId = opts.rootRunId ?? opts.parentRunId ?? row.id;
    if (opts.signal.aborted) this.onParentAbort();
    else opts.signal.addEventListener("abort", this.onParentAbort, { once: true });
    this.unregister = registerLiveRun(row.id, this.controller);
    const request = { kind: opts.kind, threadId: opts.threadId, parentRunId: opts.parentRunId, rootRunId: this.rootRunId };
    this.admission = new RunAdmission(
      this.runtime,
      { ...request, depth: this.depth, signal: this.controller.signal, capacity: opts.capacity },
      opts.definition.timeoutMs,
      this.controller,
    );
  }

  private readonly onParentAbort = () =>
    this.controller.abort(this.opts.signal.reason ?? new AbortReason("stopped", "cancelled by the caller"));

  // Built only when something is logged: a child logger per run was ~1 % of a batch item's CPU.
  private log() {
    return log.child({ run_id: this.row.id, kind: this.opts.kind, definition: this.opts.definition.name });
  }

  private duration(): number {
    return this.startedAt ? Math.round(performance.now() - this.startedAt) : 0;
  }

  private emit(status: SubagentStatusUpdate["status"], extra: Partial<SubagentStatusUpdate> = {}): void {
    const { definition, model } = this.opts;
    try {
      this.opts.onStatus?.({
        runId: this.row.id,
        definition: definition.name,
        model: model.catalogName,
        status,
        usage: this.usage,
        durationMs: this.duration(),
        ...extra,
      });
    } catch (err) {
      this.log().warn({ err }, "status listener failed");
    }
  }

  /** Admission: the slot, then running. A run refused or stopped before it starts is settled here. */
  async admit(): Promise<SubagentRunResult | undefined> {
    const signal = this.controller.signal;
    this.opts.onCreated?.(this.row.id);
    this.emit("pending");
    try {
      await this.admission.admit();
    } catch (err) {
      if (isCapacityError(err)) {
        const stopReason = err instanceof CapacityTimeoutError ? "capacity_timeout" : "capacity_rejected";
        await this.settle("failed", { stopReason, error: err.message });
        throw err;
      }
      if (signal.aborted) return await this.settle("cancelled", this.cancelledFields());
      throw err;
    }
    // Granted, but stopped in the same tick, or cancelled in the database while we waited.
    if (signal.aborted) return await this.settle("cancelled", this.cancelledFields());
    if (!(await this.row.markRunning()))
      return await this.settle("cancelled", { stopReason: "stopped", error: "stopped before it started" });
    this.startedAt = performance.now();
    this.emit("running");
    await this.opts.onStarted?.();
    if (signal.aborted) return await this.settle("cancelled", this.cancelledFields());
    this.admission.startClock();
    // The step store: resumed steps join this run's tool calls; a refused step write aborts it.
    const { opts } = this;
    if (opts.steps) this.journal = durableSteps(opts.steps, this.recorder, () => this.controller.abort(stepLeaseLost()));
    this.progress.transcript = this.journal
      ? [...this.journal.input(opts.prompt), ...(opts.approvalDecisions ? [opts.approvalDecisions] : [])]
      : (opts.replay ?? [...(opts.history ?? []), { role: "user", content: opts.prompt }]);
    return undefined;
  }

  /** The toolset: a batch item's matching call parks it; a chat child's waits for the decision. */
  async toolset(): Promise<ToolSet> {
    const { db, opts, row, controller, runtime } = this;
    const batchItem = opts.kind === "batch_item";
    const run = { userId: opts.userId, threadId: opts.threadId, runId: row.id, signal: controller.signal };
    const timeoutSeconds = runtime.config.tools.approval_timeout_seconds;
    const delegating: DelegatingRun = { runId: row.id, rootRunId: this.rootRunId, depth: this.depth, model: opts.model, signal: controller.signal, runtime };
    return runToolset({
      db,
      config: runtime.config,
      definition: opts.definition,
      ...run,
      recorder: this.recorder,
      idempotencyKey: this.journal?.key,
      approval: batchItem ? askForApproval : childApprovalGate(db, { ...run, timeoutSeconds }, this.admission),
      delegation: opts.delegate && !batchItem ? opts.delegate(delegating) : undefined,
      ensureRunRow: row.deferred ? row.ensure : undefined,
    });
  }

  /** The model call (from admit's input); usage sums as each step finishes. */
  callModel(tools: ToolSet): Promise<ModelOutcome> {
    const { opts, journal } = this;
    const def = opts.definition;
    // The input: the prompt after any history, or after the stored steps (and decisions).
    const input = this.progress.transcript;
    const model = opts.model.model;
    let typed: TypedOutput | undefined;
    try {
      typed = def.outputSchema ? typedOutput(def.outputSchema) : undefined;
    } catch (err) {
      // A schema stored before a budget that now refuses it: no answer could be checked against it.
      if (!(err instanceof SchemaRefusal)) throw err;
      const answer = { text: "", stopReason: "invalid_output", transcript: input, approvals: [] };
      return Promise.resolve({ kind: "invalid_output", answer, errors: err.message });
    }
    return answerWithModel(
      {
        // The journal's middleware only places tool calls: a run without tools makes none (and a
        // wrapped model per item was garbage on every zero-latency item).
        model: journal && Object.keys(tools).length > 0 ? wrapLanguageModel({ model, middleware: journal.middleware }) : model,
        system: def.systemPrompt,
        tools,
        typed,
        // Resumed steps count against the definition's turns.
        turnsLeft: Math.max(1, def.maxTurns - (journal?.resumedSteps ?? 0)),
        signal: this.controller.signal,
        progress: this.progress,
        promptCache: { provider: opts.model.entry.provider, modelId: opts.model.name, ...opts.promptCache },
        onStep: (step) => {
          this.usage = addStepUsage(this.usage, step.usage);
          this.emit("running");
          return journal?.stepFinished(step, def.maxTurns);
        },
      },
      input,
    );
  }

  settleOutcome(outcome: ModelOutcome): Promise<SubagentRunResult> {
    switch (outcome.kind) {
      case "aborted":
        return this.settle(this.abortStatus(), { ...this.abortFields(), transcript: outcome.transcript });
      case "awaiting_approval": {
        const tools = [...new Set(outcome.approvals.map((a) => a.toolName))].join(", ");
        return this.settle("cancelled", {
          stopReason: "awaiting_approval",
          error: `awaiting_approval: ${tools} waits for a person`,
          transcript: outcome.transcript,
          awaitingApproval: outcome.approvals,
        });
      }
      case "invalid_output":
        return this.settle("failed", {
          text: outcome.answer.text,
          stopReason: "invalid_output",
          error: `invalid_output: ${outcome.errors}`,
          errorClass: "invalid_output",
          transcript: outcome.answer.transcript,
        });
      case "answered": {
        const { text, stopReason, transcript } = outcome.answer;
        return this.settle("completed", { text, stopReason, transcript, ...(outcome.typed ? { output: outcome.output } : {}) });
      }
    }
  }

  /** The toolset or the model call threw: settled as aborted, unavailable or a model error. */
  async failed(err: unknown): Promise<SubagentRunResult> {
    const transcript = this.progress.transcript;
    if (this.controller.signal.aborted) return await this.settle(this.abortStatus(), { ...this.abortFields(), transcript });
    const unavailable = unavailableClass(err);
    if (unavailable)
      return await this.settle("failed", { stopReason: unavailable, error: `${unavailable}: ${errorText(err)}`, errorClass: unavailable, transcript });
    const errorClass = classifyModelError(err);
    this.log().warn({ err, errorClass }, "sub-agent failed");
    return await this.settle("failed", { stopReason: "error", error: errorText(err), errorClass, transcript });
  }

  /** Anything unexpected (database, onStarted): never leave the row active. */
  async crashed(err: unknown): Promise<void> {
    await this.row.failQuietly(errorText(err), this.usage);
    this.emit("failed", { error: errorText(err) });
  }

  /** Settlement: the final row (or the row handed back to the worker), then the result. */
  private async settle(status: SettledStatus, ending: RunEnding): Promise<SubagentRunResult> {
    const { opts, row, recorder } = this;
    if (this.usage.outOfRange) {
      // Absurd counts are not billed, and the answer that came with them is not taken.
      this.log().warn({ usage: this.usage }, "a provider reported token counts out of range; the answer is refused");
      if (status === "completed") {
        status = "failed";
        ending = { stopReason: "invalid_usage", error: INVALID_USAGE_ERROR, errorClass: "invalid_usage", transcript: ending.transcript };
      } else ending = { ...ending, stopReason: `${ending.stopReason ?? "stop"}; invalid_usage` };
    }
    const final = {
      status,
      stopReason: ending.stopReason,
      result: ending.text ?? null,
      error: ending.error ?? null,
      usage: this.usage,
      transcript: ending.transcript,
      toolCalls: recorder.calls,
    };
    const { runRow, kept } = await row.settle(final, opts.returnRunRow === true);
    if (!kept) this.log().warn({ status }, "run row was already final; kept the earlier outcome");
    const result = runResult(
      { runId: row.id, definition: opts.definition.name, model: opts.model.catalogName, usage: this.usage, durationMs: this.duration(), toolCalls: recorder.calls },
      status,
      ending,
      runRow,
    );
    this.emit(status, { stopReason: ending.stopReason, error: ending.error });
    return result;
  }

  end(): void {
    this.admission.end();
    this.opts.signal.removeEventListener("abort", this.onParentAbort);
    this.unregister();
  }

  private cancelledFields() {
    const reason = this.controller.signal.reason;
    return { stopReason: abortKind(reason) === "stopped" ? "stopped" : "cancelled", error: errorText(reason ?? "cancelled") };
  }

  private abortStatus(): "timed_out" | "cancelled" {
    return abortKind(this.controller.signal.reason) === "timeout" ? "timed_out" : "cancelled";
  }

  private abortFields() {
    const reason = this.controller.signal.reason;
    if (abortKind(reason) === "timeout") return { stopReason: "timeout", error: errorText(reason) };
    return this.cancelledFields();
  }
}
