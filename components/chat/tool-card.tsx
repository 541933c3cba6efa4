"use client";

import { type DynamicToolUIPart, getToolName, type ToolUIPart } from "ai";
import { useState } from "react";
import { Badge } from "@/components/ui/badge";
import { Spinner } from "@/components/ui/spinner";
import { ApprovalCard, useThreadApprovals } from "./approval-card";

const PREVIEW_CHARS = 2_000;

const STATES: Record<string, { label: string; tone: "neutral" | "amber" | "green" | "red" | "blue"; busy?: boolean }> = {
  "input-streaming": { label: "preparing", tone: "neutral", busy: true },
  "input-available": { label: "running", tone: "blue", busy: true },
  "approval-requested": { label: "awaiting approval", tone: "amber" },
  "approval-responded": { label: "approved", tone: "neutral" },
  "output-available": { label: "done", tone: "green" },
  "output-error": { label: "failed", tone: "red" },
  "output-denied": { label: "denied", tone: "red" },
};

function preview(value: unknown): string {
  if (value === undefined) return "";
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}\n…` : text;
}

/**
 * The lead's call that waits for a person: its card from the thread's waiting calls (the row
 * bound to this call id), kept with its decision once decided here; until the row is listed (or
 * once another tab decided it) the arguments in plain view.
 */
function LeadApproval({ threadId, part }: { threadId: string; part: ToolUIPart | DynamicToolUIPart }) {
  const { data } = useThreadApprovals(threadId);
  const row = data?.find((a) => a.tool_call_id === part.toolCallId);
  const [seen, setSeen] = useState(row);
  if (row && row !== seen) setSeen(row);
  const shown = row ?? seen;
  if (shown) return <ApprovalCard threadId={threadId} approval={shown} />;
  return (
    <pre className="max-h-60 overflow-auto border-t border-zinc-100 px-3 py-2 font-mono text-xs whitespace-pre-wrap break-all text-zinc-700">
      {preview(part.input)}
    </pre>
  );
}

/** Compact card for a tool call that has no dedicated component (name, state, bounded input/output). */
export function ToolCard({
  part,
  stopped = false,
  threadId,
}: {
  part: ToolUIPart | DynamicToolUIPart;
  stopped?: boolean;
  /** Given: a call waiting for a person shows its approval card. */
  threadId?: string;
}) {
  const name = getToolName(part);
  const state = STATES[part.state] ?? { label: part.state, tone: "neutral" as const };
  // A call left running in a response that was stopped is not running any more.
  const shown = stopped && state.busy ? { label: "stopped", tone: "neutral" as const, busy: false } : state;
  const input = preview(part.input);
  const output = part.state === "output-available" ? preview(part.output) : "";
  return (
    <div className="rounded-xl border border-zinc-200 bg-white text-sm shadow-xs" data-tool={name} data-state={part.state}>
      <div className="flex items-center gap-2 px-3 py-2">
        <span className="text-zinc-400" aria-hidden="true">
          ⚙
        </span>
        <span className="font-mono text-xs font-medium text-zinc-800">{name}</span>
        <Badge tone={shown.tone}>
          {shown.busy && <Spinner className="size-3" />}
          {shown.label}
        </Badge>
        {part.approval?.approved === true ? <span className="text-xs text-zinc-500">approved</span> : null}
      </div>
      {part.state === "approval-requested" && threadId ? (
        <div className="px-3 pb-3">
          <LeadApproval threadId={threadId} part={part} />
        </div>
      ) : null}
      {part.state === "output-error" && <p className="border-t border-zinc-100 px-3 py-2 text-xs text-red-700">{part.errorText}</p>}
      {part.state === "output-denied" && (
        <p className="border-t border-zinc-100 px-3 py-2 text-xs text-red-700">{part.approval?.reason ?? "Denied by the user."}</p>
      )}
      {(input || output) && (
        <details className="border-t border-zinc-100 px-3 py-2 text-xs text-zinc-600">
          <summary className="cursor-pointer select-none text-zinc-500">Details</summary>
          {input && (
            <>
              <div className="mt-2 font-medium text-zinc-500">Input</div>
              <pre className="mt-1 max-h-48 overflow-auto rounded-md bg-zinc-50 p-2 whitespace-pre-wrap break-words">{input}</pre>
            </>
          )}
          {output && (
            <>
              <div className="mt-2 font-medium text-zinc-500">Output</div>
              <pre className="mt-1 max-h-48 overflow-auto rounded-md bg-zinc-50 p-2 whitespace-pre-wrap break-words">{output}</pre>
            </>
          )}
        </details>
      )}
    </div>
  );
}
