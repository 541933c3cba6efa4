"use client";

import { useQuery } from "@tanstack/react-query";
import type { ReactNode } from "react";
import { fetchItemDetail } from "@/components/batches/api";
import { Badge } from "@/components/ui/badge";
import { fetchJson } from "@/lib/api/client";
import { type RunDetail, runDetailSchema, type ToolCallRecord } from "@/lib/api/runs";

/**
 * What an agent did: its tool calls (tool, status, duration, bounded previews of arguments and
 * result). Shared by the task card, the swarm card and the batch item detail; the lists are read
 * only when opened, so a long transcript never loads rows nobody looks at.
 */

function duration(ms: number): string {
  return ms < 1_000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

export function ToolCallList({ calls }: { calls: readonly ToolCallRecord[] }) {
  return (
    <ol aria-label="Tool calls" className="flex flex-col divide-y divide-zinc-100 rounded border border-zinc-200 bg-white">
      {calls.map((call, i) => (
        <li key={`${call.id}-${i}`} data-testid="tool-call" data-tool={call.name} data-status={call.status}>
          <details className="group px-2 py-1">
            <summary className="flex cursor-pointer list-none items-center gap-2 text-xs select-none">
              <svg aria-hidden viewBox="0 0 16 16" className="size-3 shrink-0 -rotate-90 text-zinc-400 transition-transform group-open:rotate-0">
                <path d="M4 6l4 4 4-4" fill="none" stroke="currentColor" strokeWidth="1.75" />
              </svg>
              <span className="min-w-0 truncate font-mono text-zinc-800" title={call.name}>
                {call.name}
              </span>
              <span className="ml-auto flex shrink-0 items-center gap-2">
                <span className="tabular-nums text-zinc-500">{duration(call.duration_ms)}</span>
                <Badge tone={call.status === "ok" ? "green" : "red"}>{call.status}</Badge>
              </span>
            </summary>
            <div className="mt-1 grid gap-1 pb-1 text-[11px]">
              <Preview label="Arguments" text={call.args_preview} />
              <Preview label={call.status === "ok" ? "Result" : "Error"} text={call.result_preview} error={call.status === "error"} />
            </div>
          </details>
        </li>
      ))}
    </ol>
  );
}

function Preview({ label, text, error = false }: { label: string; text: string; error?: boolean }) {
  return (
    <div className="min-w-0">
      <div className="text-zinc-500">{label}</div>
      <pre
        className={`max-h-40 overflow-auto rounded bg-zinc-50 px-1.5 py-1 font-mono whitespace-pre-wrap break-words ${error ? "text-red-700" : "text-zinc-700"}`}
      >
        {text || "—"}
      </pre>
    </div>
  );
}

function Disclosure({ count, children }: { count: number; children: ReactNode }) {
  return (
    <details data-testid="tool-calls" className="text-xs">
      <summary className="cursor-pointer text-zinc-500 select-none hover:text-zinc-800">
        {count} tool call{count === 1 ? "" : "s"}
      </summary>
      <div className="mt-1">{children}</div>
    </details>
  );
}

/** GET .../runs/{run_id}: the run row with its tool calls (cards share it under ["agent-run", thread, run]). */
export function fetchRun(threadId: string, runId: string, signal?: AbortSignal): Promise<RunDetail> {
  return fetchJson(runDetailSchema, `/api/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}`, "run", { signal });
}

/** The tool calls of one finished run (task card, swarm rows); a final run's row never changes. */
export function RunToolCalls({ threadId, runId }: { threadId: string; runId: string }) {
  const { data, error } = useQuery({
    queryKey: ["agent-run", threadId, runId],
    queryFn: ({ signal }) => fetchRun(threadId, runId, signal),
    staleTime: Number.POSITIVE_INFINITY,
  });
  if (error) return <p className="text-xs text-zinc-500">Tool calls could not be loaded.</p>;
  if (!data || data.tool_call_list.length === 0) return null;
  return (
    <Disclosure count={data.tool_call_list.length}>
      <ToolCallList calls={data.tool_call_list} />
    </Disclosure>
  );
}

/** The tool calls of a batch item's latest run; the count comes with the row, the list on open. */
export function ItemToolCalls({
  threadId,
  batchId,
  itemId,
  count,
  finishedAt,
}: {
  threadId: string;
  batchId: string;
  itemId: string;
  count: number;
  /** Refetch when the item finishes again (a retry). */
  finishedAt: string | null;
}) {
  const { data, error, isPending } = useQuery({
    queryKey: ["item-detail", threadId, batchId, itemId, finishedAt],
    queryFn: ({ signal }) => fetchItemDetail(threadId, batchId, itemId, signal),
    enabled: count > 0,
    staleTime: Number.POSITIVE_INFINITY,
  });
  if (count === 0) return null;
  return (
    <div>
      <div className="font-medium text-zinc-600">
        {count} tool call{count === 1 ? "" : "s"}
      </div>
      <div className="mt-0.5">
        {error ? (
          <p className="text-zinc-500">Tool calls could not be loaded.</p>
        ) : isPending ? (
          <p className="text-zinc-500">Loading tool calls…</p>
        ) : (
          <ToolCallList calls={data.tool_call_list} />
        )}
      </div>
    </div>
  );
}
