"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";
import { approveAllForTool, decideItemApproval, fetchWaitingApprovals, type ApprovalDecision } from "./api";
import { batchKeys } from "./panel-state";
import { errorMessage } from "./shared";
import { ErrorText } from "./ui";
import { buttonClasses } from "@/components/ui/button";

const DECISIONS = [
  { decision: "approve", label: "Approve", variant: "primary" },
  { decision: "deny", label: "Deny", variant: "danger" },
] as const;

/**
 * The items of one batch whose tool call waits for a person (tools.require_approval): how many,
 * each call's tool and arguments in plain view with Approve / Deny, and "Approve all N" for
 * each tool (N: how many of its calls wait, the server's count). Shown only while some wait; a decision re-queues the item (the engine runs it on).
 */
export function WaitingApprovals({ threadId, batch }: { threadId: string; batch: BatchProjection }) {
  const waiting = batch.counts.awaiting_approval;
  const qc = useQueryClient();
  const headingId = useId();
  const [error, setError] = useState<string | null>(null);
  const key = ["approvals", threadId, batch.id, waiting] as const;
  const list = useQuery({
    queryKey: key,
    queryFn: ({ signal }) => fetchWaitingApprovals(threadId, batch.id, signal),
    enabled: waiting > 0,
  });
  const refresh = () => {
    void qc.invalidateQueries({ queryKey: batchKeys.list(threadId) });
    void qc.invalidateQueries({ queryKey: ["approvals", threadId, batch.id] });
  };
  const decide = useMutation({
    mutationFn: (d: { itemId: string; decision: ApprovalDecision }) => decideItemApproval(threadId, batch.id, d.itemId, d.decision),
    onMutate: () => setError(null),
    onError: (err) => setError(errorMessage(err)),
    onSettled: refresh,
  });
  const approveAll = useMutation({
    mutationFn: ({ tool, count }: { tool: string; count: number }) => approveAllForTool(threadId, batch.id, tool, count),
    onMutate: () => setError(null),
    onError: (err) => setError(errorMessage(err)),
    onSettled: refresh,
  });
  if (waiting === 0) return null;
  const calls = list.data?.approvals ?? [];
  // Each tool once, with how many of its calls wait (all of them, not only the ones listed): what
  // "Approve all N" approves, sent as `seen` so the server decides only if N still wait.
  const tools = (list.data?.tools ?? []).map(({ tool, waiting: count }) => ({ tool, count }));
  const busy = decide.isPending || approveAll.isPending;

  return (
    <section
      aria-labelledby={headingId}
      data-testid="waiting-approvals"
      className="flex flex-col gap-2 rounded-md border border-amber-300 bg-amber-50 px-3 py-2"
    >
      <div className="flex flex-wrap items-center gap-2">
        <h4 id={headingId} className="text-sm font-semibold text-amber-950">
          {formatCount(waiting)} {waiting === 1 ? "item needs" : "items need"} approval
        </h4>
        <div className="ml-auto flex flex-wrap gap-1.5">
          {tools.map(({ tool, count }) => (
            <button
              key={tool}
              type="button"
              disabled={busy}
              data-testid="approve-all"
              className={buttonClasses("primary", "sm")}
              onClick={() => approveAll.mutate({ tool, count })}
            >
              Approve all {formatCount(count)}
              <span className="font-mono text-xs font-normal">{tool}</span>
            </button>
          ))}
        </div>
      </div>
      {error ? <ErrorText error={error} /> : null}
      <ul className="flex flex-col gap-1.5">
        {calls.map((c) => (
          <li key={`${c.item_id}-${c.tool}-${c.created_at}`} data-testid="waiting-approval">
            <fieldset
              aria-label={c.item_key}
              className="flex min-w-0 flex-col gap-1 rounded border border-amber-200 bg-white px-2 py-1.5 @2xl:flex-row @2xl:items-center"
            >
            <div className="min-w-0 flex-1 text-xs">
              <span className="font-medium text-zinc-800">{c.item_key}</span>
              <span className="text-zinc-500"> wants to call </span>
              <span className="font-mono font-semibold text-zinc-900">{c.tool}</span>
              <code className="mt-0.5 block break-all whitespace-pre-wrap text-zinc-700">{c.input}</code>
            </div>
            <div className="flex shrink-0 gap-1.5">
              {DECISIONS.map(({ decision, label, variant }) => (
                <button
                  key={decision}
                  type="button"
                  disabled={busy}
                  className={buttonClasses(variant, "sm")}
                  onClick={() => decide.mutate({ itemId: c.item_id, decision })}
                >
                  {label}
                </button>
              ))}
            </div>
            </fieldset>
          </li>
        ))}
      </ul>
    </section>
  );
}
