"use client";

import { useQuery } from "@tanstack/react-query";
import { type ReactNode, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { z } from "zod";
import { ChildApprovals } from "./approval-card";
import type { ToolPartProps } from "./part-props";
import { scrollToMessage } from "./scroll-to-message";
import { Badge, type Tone } from "@/components/ui/badge";
import { fetchRun, RunToolCalls } from "@/components/tool-calls";
import { Spinner } from "@/components/ui/spinner";
import { fetchJson, sendJson } from "@/lib/api/client";
import { isTerminalRunStatus, type RunDetail, type StopReportProjection, stopReportSchema } from "@/lib/api/runs";
import { formatDuration, formatTokens } from "@/lib/format";
import {
  type BackgroundReceipt,
  CHILDREN_SETTLED,
  isBackgroundReceipt,
  type SubagentDataPart,
  type TaskInput,
  type TaskToolOutput,
} from "@/lib/api/subagents";

/**
 * The `task` delegation card: definition, status (waiting for a slot, running, final),
 * model, tokens and duration. Sources, freshest first: the tool result (final), the live
 * `data-subagent` parts the tool writes while it runs, and, once the response is no longer
 * streaming but the run was not final (Stop, reload mid-run, restart), the run's row.
 */

type CardStatus = "pending" | "running" | "completed" | "failed" | "cancelled" | "timed_out" | "interrupted" | "not_run";

const STATUS: Record<CardStatus, { label: string; tone: Tone }> = {
  pending: { label: "waiting for a slot", tone: "amber" },
  running: { label: "running", tone: "blue" },
  completed: { label: "completed", tone: "green" },
  failed: { label: "failed", tone: "red" },
  cancelled: { label: "cancelled", tone: "neutral" },
  timed_out: { label: "timed out", tone: "red" },
  interrupted: { label: "interrupted", tone: "amber" },
  not_run: { label: "not run", tone: "neutral" },
};

const RESULT_PREVIEW_CHARS = 4_000;

export interface SubagentView {
  runId: string | null;
  definition: string;
  description: string;
  status: CardStatus;
  model: string | null;
  inputTokens: number;
  outputTokens: number;
  durationMs: number | null;
  error?: string | null;
  result?: string;
}

const rec = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

/** The latest live data part of one task call among a message's parts. */
export function findSubagentLive(parts: readonly unknown[] | undefined, toolCallId: string | undefined): SubagentDataPart | null {
  if (!parts || !toolCallId) return null;
  for (let i = parts.length - 1; i >= 0; i--) {
    const p = rec(parts[i]);
    const data = rec(p?.data);
    if (p?.type === "data-subagent" && data?.toolCallId === toolCallId) return data as unknown as SubagentDataPart;
  }
  return null;
}

/** Polls a run's row while it is not final (after a Stop or a reload mid-run). */
function useRunRow(threadId: string, runId: string | null, enabled: boolean) {
  return useQuery({
    queryKey: ["agent-run", threadId, runId],
    queryFn: ({ signal }) => fetchRun(threadId, runId as string, signal),
    enabled: enabled && !!runId,
    refetchInterval: (q) => (q.state.data && isTerminalRunStatus(q.state.data.status) ? false : 1_500),
  });
}

/**
 * Duration that keeps counting between updates while the run is live (updates arrive per
 * model step, which can be many seconds apart).
 */
function useLiveDuration(durationMs: number | null, ticking: boolean): number | null {
  // When the last update arrived, so the shown value can keep counting from it.
  const base = useRef({ ms: durationMs, at: Date.now() });
  if (base.current.ms !== durationMs) base.current = { ms: durationMs, at: Date.now() };
  const [now, setNow] = useState(0);
  useEffect(() => {
    if (!ticking) return;
    const timer = setInterval(() => setNow(Date.now()), 500);
    return () => clearInterval(timer);
  }, [ticking]);
  if (!ticking || durationMs === null || now === 0) return durationMs;
  return durationMs + Math.max(0, now - base.current.at);
}

export function SubagentCard({
  view,
  stale = false,
  threadId,
  background,
}: {
  view: SubagentView;
  stale?: boolean;
  /** Given: a finished run lists its tool calls. */
  threadId?: string;
  /** A background call: what the card says about it (BackgroundNote). */
  background?: ReactNode;
}) {
  const s = STATUS[view.status];
  const active = view.status === "pending" || view.status === "running";
  const label = background && active ? "running in background" : s.label;
  const duration = useLiveDuration(view.durationMs, view.status === "running" && !stale);
  return (
    <section
      data-testid="subagent-card"
      data-status={view.status}
      data-run-id={view.runId ?? undefined}
      aria-label={`Sub-agent ${view.definition}: ${view.description}`}
      className="my-1 flex w-full max-w-2xl flex-col gap-1.5 rounded-lg border border-zinc-200 bg-white px-3 py-2 text-sm shadow-xs"
    >
      <header className="flex flex-wrap items-center gap-2">
        <span aria-hidden="true" className="text-sky-700">
          ↳
        </span>
        <span className="font-mono text-xs font-medium text-zinc-800">{view.definition}</span>
        <span className="min-w-0 flex-1 truncate text-zinc-700" title={view.description}>
          {view.description}
        </span>
        <Badge tone={s.tone}>
          {active && !stale ? <Spinner className="size-3" /> : null}
          <span data-testid="subagent-status">{label}</span>
        </Badge>
      </header>
      <dl className="flex flex-wrap gap-x-4 gap-y-0.5 text-xs text-zinc-500">
        <div className="flex gap-1">
          <dt>model</dt>
          <dd className="font-mono text-zinc-700">{view.model ?? "–"}</dd>
        </div>
        <div className="flex gap-1">
          <dt>tokens</dt>
          <dd className="tabular-nums text-zinc-700" data-testid="subagent-tokens">
            {formatTokens(view.inputTokens)} in · {formatTokens(view.outputTokens)} out
          </dd>
        </div>
        <div className="flex gap-1">
          <dt>duration</dt>
          <dd className="tabular-nums text-zinc-700" data-testid="subagent-duration">
            {view.status === "pending" ? "–" : formatDuration(duration === null ? null : Math.round(duration))}
          </dd>
        </div>
        {view.runId ? (
          <div className="flex gap-1">
            <dt>run</dt>
            <dd className="font-mono text-zinc-400" title={view.runId}>
              {view.runId.slice(0, 8)}
            </dd>
          </div>
        ) : null}
      </dl>
      {background}
      {threadId && view.runId && active ? <ChildApprovals threadId={threadId} runId={view.runId} /> : null}
      {view.status === "interrupted" ? (
        <p className="text-xs text-amber-800">
          Interrupted by a server restart and not restarted. Work it had started may be partly done; check before relying on it.
        </p>
      ) : null}
      {view.error && view.status !== "completed" && view.status !== "interrupted" ? (
        <p
          className={`line-clamp-3 text-xs ${view.status === "cancelled" || view.status === "not_run" ? "text-zinc-600" : "text-red-700"}`}
          title={view.error}
        >
          {view.error}
        </p>
      ) : null}
      {threadId && view.runId && isTerminalRunStatus(view.status) ? <RunToolCalls threadId={threadId} runId={view.runId} /> : null}
      {view.result ? (
        <details className="text-xs text-zinc-600">
          <summary className="cursor-pointer select-none text-zinc-500 hover:text-zinc-800">Result</summary>
          <div className="mt-1 max-h-64 overflow-auto rounded-md bg-zinc-50 p-2 whitespace-pre-wrap break-words">
            {view.result.length > RESULT_PREVIEW_CHARS ? `${view.result.slice(0, RESULT_PREVIEW_CHARS)}…` : view.result}
          </div>
        </details>
      ) : null}
    </section>
  );
}

/** The card's view of a run as its row stores it (the source once the stream is gone). */
function runRowView(row: RunDetail, description: string): SubagentView {
  return {
    runId: row.id,
    definition: row.definition,
    description,
    status: row.status,
    model: row.model,
    inputTokens: row.usage.input_tokens,
    outputTokens: row.usage.output_tokens,
    durationMs: row.duration_ms,
    error: row.error,
  };
}

/** Combines the tool part, its live data part and (when needed) the run row into one view. */
export function subagentView(
  part: { state: string; input?: unknown; output?: unknown; errorText?: string },
  live: SubagentDataPart | null,
  row: RunDetail | undefined,
): SubagentView {
  const input = (rec(part.input) ?? {}) as Partial<TaskInput>;
  const description = input.description ?? "Task";
  const output = part.state === "output-available" ? (rec(part.output) as unknown as TaskToolOutput | null) : null;
  if (output)
    return {
      runId: output.runId,
      definition: output.definition,
      description,
      status: output.status,
      model: output.model,
      inputTokens: output.usage.inputTokens,
      outputTokens: output.usage.outputTokens,
      durationMs: output.durationMs,
      error: output.error,
      result: output.result || undefined,
    };
  if (row && (!live || isTerminalRunStatus(row.status) || row.status !== live.status)) return runRowView(row, description);
  if (live)
    return {
      runId: live.runId,
      definition: live.definition,
      description: live.description || description,
      status: live.status,
      model: live.model,
      inputTokens: live.usage.inputTokens,
      outputTokens: live.usage.outputTokens,
      durationMs: live.durationMs,
      error: live.error,
    };
  return {
    runId: null,
    definition: input.subagent ?? "general",
    description,
    status: part.state === "output-error" ? "failed" : "pending",
    model: null,
    inputTokens: 0,
    outputTokens: 0,
    durationMs: null,
    error: part.errorText,
  };
}

// ---------------------------------------------------------------------------------------------
// Background calls: the tool answered at once; the card follows the runs and links the report.

const threadMessagesSchema = z.object({
  messages: z.array(z.object({ id: z.string(), metadata: z.record(z.string(), z.unknown()).nullish() })),
});

/** The id of the lead's report on a settled background call (looked up among the thread's messages until it is stored). */
function useBackgroundReply(threadId: string, runIds: string[], settled: boolean) {
  const first = runIds[0];
  return useQuery({
    queryKey: ["background-reply", threadId, first],
    queryFn: async ({ signal }) => {
      const body = await fetchJson(threadMessagesSchema, `/api/threads/${encodeURIComponent(threadId)}`, "thread", { signal });
      const reply = body.messages.find(
        (m) => m.metadata?.trigger === CHILDREN_SETTLED && Array.isArray(m.metadata.run_ids) && m.metadata.run_ids.includes(first),
      );
      return reply?.id ?? null;
    },
    enabled: settled && !!first,
    refetchInterval: (q) => (q.state.data ? false : 2_000),
  });
}

/** Under a background card: it runs on without the answer, then a link to the lead's report on it. */
export function BackgroundNote({ threadId, runIds, settled }: { threadId: string; runIds: string[]; settled: boolean }) {
  const { data: replyId } = useBackgroundReply(threadId, runIds, settled);
  return (
    <p data-testid="background-note" className="text-xs text-zinc-600">
      {!settled ? (
        "Running in the background: the answer did not wait for it. The lead reports here when it finishes."
      ) : replyId ? (
        <>
          Finished in the background.{" "}
          <a
            href={`#message-${replyId}`}
            onClick={(e) => {
              e.preventDefault();
              scrollToMessage(replyId);
            }}
            className="font-medium text-sky-700 underline underline-offset-2 hover:text-sky-900"
          >
            Read the lead&apos;s report
          </a>
        </>
      ) : (
        "Finished in the background; the lead's report follows in this thread."
      )}
    </p>
  );
}

function BackgroundTaskCard({ input, receipt, threadId }: { input: unknown; receipt: BackgroundReceipt; threadId: string }) {
  const runId = receipt.run_ids[0] ?? null;
  const { data: row } = useRunRow(threadId, runId, true);
  const task = (rec(input) ?? {}) as Partial<TaskInput>;
  const description = task.description ?? "Task";
  const view: SubagentView = row
    ? runRowView(row, description)
    : { runId, definition: task.subagent ?? "general", description, status: "pending", model: null, inputTokens: 0, outputTokens: 0, durationMs: null };
  const settled = !!row && isTerminalRunStatus(row.status);
  return (
    <SubagentCard
      view={view}
      threadId={threadId}
      background={<BackgroundNote threadId={threadId} runIds={receipt.run_ids} settled={settled} />}
    />
  );
}

/** The chat's `tool-task` entry: a background call's receipt, or the task the response waited for. */
export function SubagentToolCard(props: ToolPartProps) {
  const part = props.part as unknown as { input?: unknown; output?: unknown };
  if (isBackgroundReceipt(part.output)) return <BackgroundTaskCard input={part.input} receipt={part.output} threadId={props.threadId} />;
  return <ForegroundTaskCard {...props} />;
}

function ForegroundTaskCard({ part, message, threadId, streaming }: ToolPartProps) {
  const toolPart = part as unknown as { toolCallId: string; state: string; input?: unknown; output?: unknown; errorText?: string };
  const live = findSubagentLive(message.parts, toolPart.toolCallId);
  const final = toolPart.state === "output-available" || toolPart.state === "output-error";
  const needsRow = !final && !streaming && !!live && !isTerminalRunStatus(live.status);
  const { data: row } = useRunRow(threadId, live?.runId ?? null, needsRow);
  const view = subagentView(toolPart, live, needsRow ? row : undefined);
  // A response that ended before this call even created its run: it never started.
  const neverStarted = !final && !streaming && !live;
  return (
    <SubagentCard
      view={neverStarted ? { ...view, status: "cancelled", error: "stopped before it started" } : view}
      stale={!final && !streaming && !row}
      threadId={threadId}
    />
  );
}

// ---------------------------------------------------------------------------------------------
// Stop: cascade on the server, then the transcript reports how many sub-agents stopped.

const stopReports = new Map<string, StopReportProjection>();
const listeners = new Set<() => void>();
const subscribe = (fn: () => void) => {
  listeners.add(fn);
  return () => listeners.delete(fn);
};

/**
 * Stops a lead run and every sub-agent under it (POST …/runs/{run_id}/stop), remembers the
 * report for <StopReport>, then stops the client stream. Falls back to the client stop alone
 * when the message has no run id yet.
 */
export async function stopLeadRun(
  threadId: string,
  message: { metadata?: { runId?: string } } | undefined,
  stopStream: () => unknown,
): Promise<void> {
  const runId = message?.metadata?.runId;
  try {
    if (runId) {
      const url = `/api/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}/stop`;
      const report = await sendJson(stopReportSchema, url, "stop report").catch(() => null);
      if (report) {
        stopReports.set(runId, report);
        for (const fn of listeners) fn();
      }
    }
  } finally {
    await stopStream();
  }
}

/** "Stopped N sub-agents (M failed to stop)" under a stopped lead message; live or after reload. */
export function StopReport({ threadId, runId, cancelled }: { threadId: string; runId?: string; cancelled: boolean }) {
  const live = useSyncExternalStore(
    subscribe,
    () => (runId ? stopReports.get(runId) : undefined),
    () => undefined,
  );
  const { data } = useQuery({
    queryKey: ["agent-run", threadId, runId, "stop"],
    queryFn: ({ signal }) => fetchRun(threadId, runId as string, signal),
    enabled: cancelled && !live && !!runId,
  });
  const report = live ?? data?.stop_report ?? null;
  if (!report) return null;
  const total = report.stopped + report.failed_to_stop;
  return (
    <p role="status" data-testid="stop-report" className="text-xs text-zinc-600">
      {total === 0
        ? "Stopped. No sub-agents were running."
        : `Stopped ${report.stopped} sub-agent${report.stopped === 1 ? "" : "s"}` +
          (report.failed_to_stop ? `; ${report.failed_to_stop} failed to stop (still running elsewhere).` : ".")}
    </p>
  );
}
