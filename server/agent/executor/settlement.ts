import { randomUUID } from "node:crypto";
import type { SubagentRunStatus, SubagentUsage } from "@/lib/api/subagents";
import type { Db } from "@/server/db/client";
import type { RunErrorClass } from "@/server/runtime/model-errors";
import type { ToolCallRecord } from "@/lib/api/runs";
import type { ApprovalRequest } from "../chat-approvals";
import {
  createRun,
  type FinishedRunRow,
  finishedRunRow,
  finishRun,
  insertFinishedRun,
  markRunning,
  type TerminalStatus,
} from "../runs";
import type { RunSubagentOptions, SubagentRunResult } from "./types";

/**
 * The settlement stage: the run row from its start to its final state, and the result the
 * caller gets. A batch item's durable record is its item row (claimed, fenced, settled): its run
 * row is written once at the end instead of pending → running → final, or as soon as a tool is
 * about to run (tools record their run on what they write). Nobody reads a batch item's run
 * before the settle links it to the item, and Stop never reaches batch items.
 */

/** The fields of a sub-agent's run row, as runSubagent writes them (createRun takes them). */
export function childRunFields(opts: Omit<RunSubagentOptions, "signal">) {
  return {
    userId: opts.userId,
    threadId: opts.threadId,
    parentRunId: opts.parentRunId,
    rootRunId: opts.rootRunId ?? opts.parentRunId,
    retryOfRunId: opts.retryOfRunId,
    resumedFromRunId: opts.resumedFromRunId,
    kind: opts.kind,
    definition: opts.definition.name,
    model: opts.model.catalogName,
    prompt: opts.prompt,
    toolCallId: opts.toolCallId,
    depth: opts.depth ?? 1,
  };
}

/** How a run ended, as settle() takes it. */
export interface RunEnding {
  text?: string;
  output?: unknown;
  stopReason: string | null;
  error?: string;
  errorClass?: RunErrorClass;
  transcript?: unknown[];
  awaitingApproval?: ApprovalRequest[];
}

export type SettledStatus = TerminalStatus & SubagentRunStatus;

export class RunRow {
  readonly createdAt = new Date();
  /** Wall clock once the run started (after admission). */
  startedAt: Date | null = null;
  private written: boolean;
  private inserting: Promise<void> | undefined;

  private constructor(
    private readonly db: Db,
    readonly id: string,
    private readonly fields: ReturnType<typeof childRunFields>,
    readonly deferred: boolean,
  ) {
    this.written = !deferred;
  }

  /** The pending row (created here unless the caller made it, or deferred for a batch item). */
  static async open(db: Db, opts: RunSubagentOptions): Promise<RunRow> {
    const fields = childRunFields(opts);
    const deferred = opts.kind === "batch_item";
    const id = deferred ? randomUUID() : (opts.runId ?? (await createRun(db, fields)).id);
    return new RunRow(db, id, fields, deferred);
  }

  /** A deferred row, written (once) as running before the first tool runs. */
  readonly ensure = (): Promise<void> => {
    this.inserting ??= createRun(this.db, { ...this.fields, id: this.id, createdAt: this.createdAt, status: "running" }).then(() => {
      this.written = true;
    });
    return this.inserting;
  };

  /** Pending → running; false when it was stopped meanwhile (a deferred row has nothing to mark). */
  async markRunning(): Promise<boolean> {
    this.startedAt = new Date();
    return this.deferred || (await markRunning(this.db, { runId: this.id }));
  }

  /**
   * Writes the final row; with `returnRow`, a row still unwritten is handed back instead for the
   * worker to write with the item's settlement. False-y `kept`: the row was already final.
   */
  async settle(
    final: { status: SettledStatus; stopReason: string | null; result: string | null; error: string | null; usage: SubagentUsage; transcript?: unknown[]; toolCalls: ToolCallRecord[] },
    returnRow: boolean,
  ): Promise<{ runRow?: FinishedRunRow; kept: boolean }> {
    await this.inserting?.catch(() => {});
    const row = { ...this.fields, id: this.id, createdAt: this.createdAt, startedAt: this.startedAt, ...final };
    if (!this.written && returnRow) return { runRow: finishedRunRow(row), kept: true };
    if (!this.written) {
      await insertFinishedRun(this.db, row);
      return { kept: true };
    }
    return { kept: await finishRun(this.db, { runId: this.id, ...final }) };
  }

  /** Anything unexpected (database, onStarted): never leave the row active. Never throws. */
  async failQuietly(error: string, usage: SubagentUsage): Promise<void> {
    const failed = { status: "failed" as const, stopReason: "error", error, usage };
    await this.inserting?.catch(() => {});
    await (this.written
      ? finishRun(this.db, { runId: this.id, ...failed })
      : insertFinishedRun(this.db, { ...this.fields, id: this.id, createdAt: this.createdAt, startedAt: this.startedAt, ...failed })
    ).catch(() => {});
  }
}

/** The caller's result of a settled run. */
export function runResult(
  run: { runId: string; definition: string; model: string; usage: SubagentUsage; durationMs: number; toolCalls: ToolCallRecord[] },
  status: SettledStatus,
  ending: RunEnding,
  runRow: FinishedRunRow | undefined,
): SubagentRunResult {
  return {
    runId: run.runId,
    status,
    text: ending.text ?? "",
    usage: run.usage,
    model: run.model,
    stopReason: ending.stopReason,
    definition: run.definition,
    durationMs: run.durationMs,
    toolCalls: [...run.toolCalls],
    ...(runRow ? { runRow } : {}),
    ...("output" in ending ? { output: ending.output } : {}),
    ...(ending.error !== undefined ? { error: ending.error } : {}),
    ...(ending.errorClass !== undefined ? { errorClass: ending.errorClass } : {}),
    ...(ending.awaitingApproval?.length ? { awaitingApproval: ending.awaitingApproval } : {}),
  };
}
