"use client";

import { useQuery } from "@tanstack/react-query";
import { z } from "zod";
import type { LooseToolPart, ToolPartProps } from "./part-props";
import { ChildApprovals } from "./approval-card";
import { BackgroundNote } from "./subagent-card";
import { RunToolCalls } from "@/components/tool-calls";
import { fetchJson } from "@/lib/api/client";
import { formatTokens } from "@/lib/format";
import { isTerminalRunStatus, runProjectionSchema } from "@/lib/api/runs";
import { type BackgroundReceipt, isBackgroundReceipt } from "@/lib/api/subagents";
import { Badge, type Tone } from "@/components/ui/badge";
import { Spinner } from "@/components/ui/spinner";
import type {
  SwarmAggregate,
  SwarmItemRow,
  SwarmLiveData,
  SwarmResult,
  SwarmTraceEntry,
} from "@/lib/api/swarm";

/** The badge colour of a swarm's or an item's status (queued and cancelled stay neutral). */
function statusTone(status: string): Tone {
  if (status === "running") return "blue";
  if (status === "completed") return "green";
  if (status === "failed" || status === "rejected") return "red";
  return status === "suspended" || status === "partial" ? "amber" : "neutral";
}

/** Rows shown before the list scrolls; the list itself is height-bounded too. */
const SUMMARY_PREVIEW_CHARS = 280;

const rec = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

function asResult(v: unknown): SwarmResult | null {
  const r = rec(v);
  return r && rec(r.aggregate) && Array.isArray(r.items) ? (r as unknown as SwarmResult) : null;
}

/** The live `data-swarm` part of this tool call among a message's parts (the last write wins). */
export function findSwarmLive(parts: readonly unknown[] | undefined, toolCallId: string | undefined): SwarmLiveData | null {
  if (!parts || !toolCallId) return null;
  for (let i = parts.length - 1; i >= 0; i--) {
    const p = rec(parts[i]);
    if (p?.type === "data-swarm" && p.id === toolCallId) return asResult(p.data) as SwarmLiveData | null;
  }
  return null;
}

function seconds(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "–";
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

const shortId = (id: string) => id.slice(0, 8);
const preview = (text: string) => (text.length > SUMMARY_PREVIEW_CHARS ? `${text.slice(0, SUMMARY_PREVIEW_CHARS - 1)}…` : text);

function traceLabel(e: SwarmTraceEntry): string {
  switch (e.type) {
    case "item_queued":
      return "queued";
    case "item_started":
      return e.attempt && e.attempt > 1 ? `started (attempt ${e.attempt})` : "started";
    case "item_suspended":
      return `rate limited on attempt ${e.attempt ?? 1}; retry in ${seconds(e.delay_ms)}`;
    case "capacity_changed":
      return `capacity ${e.direction === "down" ? "reduced" : "recovered"} to ${e.effective_capacity}`;
    case "shared_capacity_waiting":
      return "waiting for a shared sub-agent slot";
    case "child_started":
      return "child run executing";
    case "child_completed":
      return `child run ${e.status ?? "settled"}${e.failure_class ? ` (${e.failure_class})` : ""}`;
    case "tool_admission_rejected":
      return "call rejected";
    default:
      return e.type.replaceAll("_", " ");
  }
}

function Counts({ aggregate }: { aggregate: SwarmAggregate }) {
  const c = aggregate.counts;
  const parts = [
    `${c.total} item${c.total === 1 ? "" : "s"}`,
    `${c.completed} completed`,
    `${c.failed} failed`,
    `${c.cancelled} cancelled`,
  ];
  if (c.running) parts.push(`${c.running} running`);
  if (c.queued) parts.push(`${c.queued} queued`);
  if (c.suspended) parts.push(`${c.suspended} waiting to retry`);
  return (
    <p data-testid="swarm-counts" className="text-xs text-zinc-600">
      {parts.join(" · ")}
    </p>
  );
}

const SETTLED_ROW = new Set(["completed", "failed", "cancelled"]);

/** Each item's input from the call: the string that filled {{item}} (ids item-1..N), or an explicit item's task. */
export function swarmInputs(input: unknown): Map<string, string> {
  const out = new Map<string, string>();
  const i = input && typeof input === "object" ? (input as { prompt_template?: unknown; items?: unknown }) : null;
  if (!Array.isArray(i?.items)) return out;
  i.items.forEach((item: unknown, index: number) => {
    if (typeof item === "string") out.set(`item-${index + 1}`, item);
    else if (item && typeof item === "object") {
      const o = item as { item_id?: unknown; task?: unknown };
      if (typeof o.item_id === "string" && typeof o.task === "string") out.set(o.item_id, o.task);
    }
  });
  return out;
}

function Row({
  row,
  index,
  input,
  ended,
  threadId,
  approvalsThreadId,
}: {
  row: SwarmItemRow;
  index: number;
  input?: string;
  ended: boolean;
  threadId?: string;
  /** Given: a running item shows its calls that wait for a person. */
  approvalsThreadId?: string;
}) {
  // The response ended without this swarm's result (Stop, restart): nothing is running any more.
  const status = ended && (row.status === "running" || row.status === "queued") ? "cancelled" : row.status;
  return (
    <li
      data-testid="swarm-row"
      data-item-id={row.item_id}
      data-status={status}
      className="flex flex-col gap-0.5 border-b border-zinc-100 px-2 py-1.5 last:border-b-0"
    >
      <div className="flex flex-wrap items-center gap-x-2 gap-y-0.5 text-xs">
        <span className="w-5 shrink-0 text-right tabular-nums text-zinc-400">{index + 1}</span>
        <span className="max-w-48 truncate font-mono font-medium text-zinc-800" title={row.item_id}>
          {row.item_id}
        </span>
        {input !== undefined && input !== row.item_id ? (
          <span data-testid="swarm-row-input" className="min-w-0 max-w-64 truncate text-zinc-700" title={input}>
            {input}
          </span>
        ) : null}
        <span className="text-zinc-500">{row.profile}</span>
        <Badge tone={statusTone(status)}>
          {status === "running" ? <Spinner className="size-3" /> : null}
          {status === "suspended" ? "waiting to retry" : status}
        </Badge>
        {row.failure_class ? <span className="text-red-700">{row.failure_class.replaceAll("_", " ")}</span> : null}
        {row.attempts > 1 ? <span className="text-zinc-500">{row.attempts} attempts</span> : null}
        <span className="ml-auto tabular-nums text-zinc-500">{seconds(row.duration_ms)}</span>
        {row.usage && row.usage.input_tokens + row.usage.output_tokens > 0 ? (
          <span className="tabular-nums text-zinc-500" title="tokens of this item's child runs">
            {formatTokens(row.usage.input_tokens)} in · {formatTokens(row.usage.output_tokens)} out
          </span>
        ) : null}
        {row.child_run_id ? (
          <span className="font-mono text-zinc-400" title={`child run ${row.child_run_id}`}>
            {shortId(row.child_run_id)}
          </span>
        ) : null}
      </div>
      {row.summary ? (
        <p className="line-clamp-2 pl-7 text-xs text-zinc-700" title={row.summary.length > SUMMARY_PREVIEW_CHARS ? undefined : row.summary}>
          {preview(row.summary)}
        </p>
      ) : null}
      {row.error && row.status !== "completed" ? <p className="line-clamp-2 pl-7 text-xs text-red-700">{row.error}</p> : null}
      {approvalsThreadId && row.child_run_id && status === "running" ? (
        <div className="pl-7">
          <ChildApprovals threadId={approvalsThreadId} runId={row.child_run_id} />
        </div>
      ) : null}
      {threadId && row.child_run_id && SETTLED_ROW.has(status) ? (
        <div className="pl-7">
          <RunToolCalls threadId={threadId} runId={row.child_run_id} />
        </div>
      ) : null}
    </li>
  );
}

function Trace({ entries, dropped }: { entries: readonly SwarmTraceEntry[]; dropped: number }) {
  if (entries.length === 0) return null;
  return (
    <details data-testid="swarm-trace" className="text-xs">
      <summary className="cursor-pointer select-none text-zinc-600 hover:text-zinc-900">
        Trace ({entries.length + dropped} events)
      </summary>
      <ol className="mt-1 max-h-60 overflow-y-auto rounded border border-zinc-100 bg-zinc-50 px-2 py-1 font-mono text-[11px] leading-5 text-zinc-700">
        {dropped ? <li className="text-zinc-400">… {dropped} earlier events (see the run's events)</li> : null}
        {entries.map((e, i) => (
          <li key={i} className="flex gap-2">
            <span className="w-14 shrink-0 text-right tabular-nums text-zinc-400">{(e.t / 1000).toFixed(2)}s</span>
            {e.item_id ? <span className="max-w-32 shrink-0 truncate text-zinc-900">{e.item_id}</span> : null}
            <span>{traceLabel(e)}</span>
            {e.detail ? <span className="truncate text-zinc-400">{e.detail}</span> : null}
          </li>
        ))}
      </ol>
    </details>
  );
}

/**
 * The agent_swarm card: aggregate counts, one bounded row per item in input order (live
 * while the swarm runs, from the `data-swarm` part) and a collapsible trace.
 */
export function SwarmCard({
  part,
  live,
  stopped = false,
  threadId,
}: {
  part: LooseToolPart;
  live?: SwarmLiveData | null;
  /** Given: settled rows list their child's tool calls. */
  threadId?: string;
  /** The response ended without a tool result (Stop): show the last live state as stopped. */
  stopped?: boolean;
}) {
  const output = asResult(part.output);
  const data: SwarmResult | null = output ?? live ?? null;
  const trace = live?.trace ?? [];
  const inputs = swarmInputs(part.input);
  const settled = part.state === "output-available" || part.state === "output-error" || stopped;
  const status =
    part.state === "output-error" ? "failed" : !output && stopped ? "cancelled" : (data?.aggregate.status ?? "running");
  const title =
    status === "rejected"
      ? "Swarm rejected"
      : !settled
        ? "Swarm running"
        : status === "cancelled"
          ? "Swarm cancelled"
          : "Swarm finished";
  const reduced = data && data.aggregate.effective_capacity < data.aggregate.concurrency && status === "running";

  return (
    <section
      data-testid="swarm-card"
      data-status={status}
      aria-label="Agent swarm"
      className="my-1 flex w-full max-w-2xl flex-col gap-2 rounded-lg border border-zinc-200 bg-white px-3 py-2 text-sm shadow-xs"
    >
      <header className="flex flex-wrap items-center gap-2">
        <svg aria-hidden viewBox="0 0 16 16" className="size-4 text-sky-700">
          <circle cx="4" cy="4" r="1.6" fill="currentColor" />
          <circle cx="12" cy="4" r="1.6" fill="currentColor" />
          <circle cx="4" cy="12" r="1.6" fill="currentColor" />
          <circle cx="12" cy="12" r="1.6" fill="currentColor" />
          <circle cx="8" cy="8" r="1.9" fill="currentColor" />
        </svg>
        <span className="font-medium">{title}</span>
        {!settled ? <Spinner className="size-3.5 text-zinc-500" /> : null}
        <span className="ml-auto flex items-center gap-2">
          {data && status !== "rejected" ? (
            <span className="text-xs tabular-nums text-zinc-500">
              {seconds(data.aggregate.duration_ms)} · concurrency {data.aggregate.concurrency}
              {reduced ? ` (now ${data.aggregate.effective_capacity})` : ""}
            </span>
          ) : null}
          <Badge tone={statusTone(status)}>{status}</Badge>
        </span>
      </header>
      {part.state === "output-error" ? (
        <p className="text-xs text-red-700">{part.errorText ?? "The swarm failed."}</p>
      ) : data?.rejection ? (
        <p className="text-xs text-red-700">Nothing ran: {data.rejection.message}</p>
      ) : data ? (
        <>
          <Counts aggregate={data.aggregate} />
          <ol aria-label="Swarm items" className="max-h-96 overflow-y-auto rounded border border-zinc-100">
            {data.items.map((row, i) => (
              <Row
                key={row.item_id}
                row={row}
                index={i}
                input={inputs.get(row.item_id)}
                ended={!output && stopped}
                threadId={settled ? threadId : undefined}
                approvalsThreadId={settled ? undefined : threadId}
              />
            ))}
          </ol>
        </>
      ) : (
        <p className="text-xs text-zinc-500">Starting the swarm…</p>
      )}
      <Trace entries={trace} dropped={live?.trace_dropped ?? 0} />
    </section>
  );
}

const threadRunsSchema = z.object({ runs: z.array(runProjectionSchema) });

/**
 * A background swarm's card: the tool answered at once, so the items are followed through the
 * thread's runs (every run of this call, retries included) until all have settled.
 */
function BackgroundSwarmCard({ part, receipt, threadId }: { part: LooseToolPart; receipt: BackgroundReceipt; threadId: string }) {
  const { data: runs } = useQuery({
    queryKey: ["background-swarm", threadId, part.toolCallId],
    queryFn: async ({ signal }) =>
      (await fetchJson(threadRunsSchema, `/api/threads/${encodeURIComponent(threadId)}/runs`, "runs", { signal })).runs.filter(
        (r) => r.kind === "swarm_child" && r.tool_call_id === part.toolCallId,
      ),
    refetchInterval: (q) => (q.state.data?.length && q.state.data.every((r) => isTerminalRunStatus(r.status)) ? false : 1_500),
  });
  const byId = new Map((runs ?? []).map((r) => [r.id, r]));
  const settled = !!runs?.length && runs.every((r) => isTerminalRunStatus(r.status));
  const count = (status: string) => (runs ?? []).filter((r) => r.status === status).length;
  const inputs = swarmInputs(part.input);
  const ids = [...inputs.keys()];
  return (
    <section
      data-testid="swarm-card"
      data-status={settled ? "settled" : "running"}
      aria-label="Agent swarm"
      className="my-1 flex w-full max-w-2xl flex-col gap-2 rounded-lg border border-zinc-200 bg-white px-3 py-2 text-sm shadow-xs"
    >
      <header className="flex flex-wrap items-center gap-2">
        <span className="font-medium">{settled ? "Swarm finished in the background" : "Swarm running in the background"}</span>
        {!settled ? <Spinner className="size-3.5 text-zinc-500" /> : null}
        <span className="ml-auto">
          <Badge tone={settled ? "green" : "blue"}>{settled ? "finished" : "running in background"}</Badge>
        </span>
      </header>
      <p className="text-xs text-zinc-500">
        {receipt.run_ids.length} item{receipt.run_ids.length === 1 ? "" : "s"} · {count("completed")} completed · {count("running")} running ·{" "}
        {count("failed") + count("timed_out")} failed · {count("cancelled") + count("interrupted")} stopped
      </p>
      <ol aria-label="Swarm items" className="max-h-64 overflow-y-auto rounded border border-zinc-100 text-xs">
        {receipt.run_ids.map((id, i) => {
          const run = byId.get(id);
          const label = ids[i] ?? `item-${i + 1}`;
          return (
            <li key={id} className="flex flex-col gap-1 border-b border-zinc-100 px-2 py-1 last:border-b-0">
              <div className="flex items-center gap-2">
                <span className="font-mono text-zinc-700">{label}</span>
                <span className="min-w-0 flex-1 truncate text-zinc-500" title={inputs.get(label)}>
                  {inputs.get(label) ?? ""}
                </span>
                <Badge tone={statusTone(run?.status ?? "queued")}>{run?.status ?? "pending"}</Badge>
              </div>
              {run?.status === "running" ? <ChildApprovals threadId={threadId} runId={id} /> : null}
            </li>
          );
        })}
      </ol>
      <BackgroundNote threadId={threadId} runIds={receipt.run_ids} settled={settled} />
    </section>
  );
}

/** The chat's `tool-agent_swarm` entry: the card with this call's live part from the same message. */
export function SwarmToolCard({ part, message, streaming, threadId }: ToolPartProps) {
  const toolPart = part as unknown as LooseToolPart;
  if (isBackgroundReceipt(toolPart.output)) return <BackgroundSwarmCard part={toolPart} receipt={toolPart.output} threadId={threadId} />;
  return (
    <SwarmCard
      part={toolPart}
      live={findSwarmLive(message.parts, toolPart.toolCallId)}
      stopped={!streaming && toolPart.state !== "output-available" && toolPart.state !== "output-error"}
      threadId={threadId}
    />
  );
}
