"use client";

import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useId, useState } from "react";
import { z } from "zod";
import { Badge } from "@/components/ui/badge";
import { Button } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import {
  APPROVAL_REASON_MAX_CHARS,
  CARD_PILOT_ITEMS,
  type ChatApproval,
  chatApprovalsSchema,
  type DecidedChatApproval,
  decidedChatApprovalSchema,
} from "@/lib/api/approvals";
import type { BatchEstimate } from "@/lib/api/batches";
import { ApiError, fetchJson, sendJson } from "@/lib/api/client";
import { formatCount, formatTokens, formatUsd } from "@/lib/format";
import { outputAssumptionText } from "@/lib/output-assumption";

/**
 * Approvals in the chat: a call of the lead or of a task / swarm child that waits for a person.
 * The waiting calls come from GET /api/threads/{id}/approvals (polled, so another tab's decision,
 * a timeout or a new call shows within a couple of seconds); the card shows the tool and its
 * arguments in plain view with Approve and Deny (an optional reason), and what was decided.
 */

const POLL_MS = 2_000;

export const approvalsKey = (threadId: string) => ["chat-approvals", threadId] as const;

/** The thread's waiting calls (one query per thread, shared by every card and the chat). */
export function useThreadApprovals(threadId: string) {
  return useQuery({
    queryKey: approvalsKey(threadId),
    queryFn: ({ signal }) =>
      fetchJson(chatApprovalsSchema, `/api/threads/${encodeURIComponent(threadId)}/approvals`, "approvals", { signal }).then((r) => r.approvals),
    refetchInterval: POLL_MS,
  });
}

const decidedResponseSchema = z.object({ approval: decidedChatApprovalSchema });

/** What this tab decided, kept for the card after the call leaves the waiting list. */
const decidedHere = new Map<string, DecidedChatApproval>();

function formatArguments(input: unknown): string {
  if (input === undefined || input === null) return "(no arguments)";
  const text = JSON.stringify(input, null, 2) ?? "";
  return text === "{}" ? "(no arguments)" : text;
}

function Arguments({ input }: { input: unknown }) {
  return (
    <pre
      data-testid="approval-arguments"
      className="max-h-60 overflow-auto rounded-md border border-amber-200 bg-white p-2 font-mono text-xs whitespace-pre-wrap break-all text-zinc-800"
    >
      {formatArguments(input)}
    </pre>
  );
}

/** The decision of a call, once taken: what the person sees instead of the buttons. */
function DecidedNote({ decided }: { decided: DecidedChatApproval }) {
  return decided.status === "approved" ? (
    <p role="status" className="flex items-center gap-1.5 text-xs text-emerald-800">
      <Spinner className="size-3" />{" "}
      {decided.option === "pilot" ? `Running a pilot of ${CARD_PILOT_ITEMS} items first.` : "Approved. The call runs, and the answer goes on."}
    </p>
  ) : (
    <p role="status" className="text-xs text-red-800">
      Denied{decided.reason ? `: ${decided.reason}` : ""}. The agent is told so.
    </p>
  );
}

const TEMPLATE_SHOWN_CHARS = 160;

/**
 * A batch_task's summary, first: what would run (sub-agent, model, template, items, lane), then
 * the estimate (tokens, what it costs live and on the provider's batch lane, its judges' share).
 * The raw arguments (hundreds of items) are under Details.
 */
function EstimateFacts({ estimate, input }: { estimate: BatchEstimate; input: unknown }) {
  const args = input && typeof input === "object" && !Array.isArray(input) ? (input as Record<string, unknown>) : {};
  const text = (v: unknown) => (typeof v === "string" && v !== "" ? v : null);
  const template = text(args.prompt_template);
  const lane = args.lane === "provider_batch" ? "Provider batch" : "Live";
  const rows: [string, string][] = [
    ["Sub-agent", estimate.subagent ?? text(args.subagent) ?? "—"],
    ["Model", estimate.model ?? "—"],
    [
      "Template",
      template === null ? "none (each item is its prompt)" : template.length > TEMPLATE_SHOWN_CHARS ? `${template.slice(0, TEMPLATE_SHOWN_CHARS)}…` : template,
    ],
    ["Items", formatCount(estimate.items)],
    ["Runs on", text(args.variant_of) ? `${lane}, a variant of ${text(args.variant_of)}` : lane],
    [
      "Tokens",
      `${formatTokens(estimate.input_tokens)} in${estimate.cached_input_tokens ? ` (${formatTokens(estimate.cached_input_tokens)} cached)` : ""}, ${formatTokens(estimate.output_tokens)} out${estimate.tokens_method === "approx" ? " (approx.)" : ""}`,
    ],
    ...(estimate.output_per_item ? ([["Output", outputAssumptionText(estimate.output_per_item)]] as [string, string][]) : []),
    ["Live", formatUsd(estimate.cost_usd.live)],
    ["Batch lane", estimate.cost_usd.provider_batch === undefined ? "not offered by this model" : formatUsd(estimate.cost_usd.provider_batch)],
  ];
  // Judges run live on either lane; their tokens and cost are in the rows above.
  if (estimate.judges)
    rows.push(["Judges", `${formatCount(estimate.judges.calls)} ${estimate.judges.calls === 1 ? "call" : "calls"}, ${formatUsd(estimate.judges.cost_usd)} (included above)`]);
  return (
    <dl data-testid="approval-estimate" className="grid grid-cols-[auto_1fr] gap-x-3 gap-y-0.5 rounded-md border border-amber-200 bg-white p-2 text-xs">
      {rows.map(([label, value]) => (
        <div key={label} className="contents">
          <dt className="text-zinc-500">{label}</dt>
          <dd className="min-w-0 break-words font-medium text-zinc-900">{value}</dd>
        </div>
      ))}
    </dl>
  );
}

/** One waiting call: tool, arguments, Approve / Deny with an optional reason; then the decision. */
export function ApprovalCard({ threadId, approval }: { threadId: string; approval: ChatApproval }) {
  const queryClient = useQueryClient();
  const reasonId = useId();
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [decided, setDecided] = useState<DecidedChatApproval | undefined>(() => decidedHere.get(approval.id));

  async function decide(decision: "approve" | "deny", option?: "pilot") {
    setBusy(true);
    setError(null);
    try {
      const denial = estimate ? "cancelled after seeing the estimate; nothing was submitted" : reason.trim();
      const body = decision === "deny" && denial ? { decision, reason: denial } : option ? { decision, option } : { decision };
      const url = `/api/threads/${encodeURIComponent(threadId)}/approvals/${encodeURIComponent(approval.id)}`;
      const { approval: result } = await sendJson(decidedResponseSchema, url, "approval", body);
      decidedHere.set(approval.id, result);
      setDecided(result);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 409 ? `${err.message}.` : err instanceof Error ? err.message : "The decision was not sent.");
    } finally {
      setBusy(false);
      void queryClient.invalidateQueries({ queryKey: approvalsKey(threadId) });
    }
  }

  const estimate = approval.tool === "batch_task" ? approval.estimate : undefined;
  const expires = new Date(approval.expires_at);
  return (
    <section
      data-testid="approval-card"
      data-approval-id={approval.id}
      data-decided={decided?.status}
      aria-label={`Approval: ${approval.tool}`}
      className="flex min-w-0 flex-col gap-2 rounded-lg border border-amber-300 bg-amber-50/60 px-3 py-2 text-sm"
    >
      <header className="flex flex-wrap items-center gap-2">
        <Badge tone="amber">needs your approval</Badge>
        <span className="text-xs text-zinc-600">{approval.kind === "lead" ? "The lead agent" : "A sub-agent"} wants to call</span>
        <span className="font-mono text-xs font-semibold text-zinc-900">{approval.tool}</span>
      </header>
      {estimate ? (
        <>
          <EstimateFacts estimate={estimate} input={approval.input} />
          <details className="text-xs text-zinc-700">
            <summary className="cursor-pointer select-none">Details: the call's arguments</summary>
            <Arguments input={approval.input} />
          </details>
        </>
      ) : (
        <Arguments input={approval.input} />
      )}
      {decided ? (
        <DecidedNote decided={decided} />
      ) : estimate ? (
        <div className="flex flex-wrap gap-2">
          <Button size="sm" disabled={busy} onClick={() => void decide("approve")}>
            Run
          </Button>
          <Button size="sm" variant="secondary" disabled={busy} onClick={() => void decide("approve", "pilot")}>
            Run a pilot of {CARD_PILOT_ITEMS}
          </Button>
          <Button size="sm" variant="danger" disabled={busy} onClick={() => void decide("deny")}>
            Cancel
          </Button>
        </div>
      ) : (
        <>
          <label htmlFor={reasonId} className="sr-only">
            Reason for denying (optional)
          </label>
          <div className="flex flex-col gap-2 sm:flex-row sm:items-center">
            <input
              id={reasonId}
              value={reason}
              maxLength={APPROVAL_REASON_MAX_CHARS}
              onChange={(e) => setReason(e.target.value)}
              placeholder="Reason, if you deny (optional)"
              className="h-8 w-full min-w-0 rounded-lg border border-zinc-300 bg-white px-2 text-sm placeholder:text-zinc-400 sm:flex-1"
            />
            <div className="flex shrink-0 gap-2">
              <Button size="sm" disabled={busy} onClick={() => void decide("approve")}>
                Approve
              </Button>
              <Button size="sm" variant="danger" disabled={busy} onClick={() => void decide("deny")}>
                Deny
              </Button>
            </div>
          </div>
          <p className="text-xs text-zinc-500">
            Without a decision, it is denied automatically at {expires.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })}.
          </p>
        </>
      )}
      {error ? (
        <p role="alert" className="text-xs text-red-700">
          {error}
        </p>
      ) : null}
    </section>
  );
}

/** The waiting calls of one child run, inside its task or swarm card (and what this tab decided on them). */
export function ChildApprovals({ threadId, runId }: { threadId: string; runId: string }) {
  const { data } = useThreadApprovals(threadId);
  const waiting = (data ?? []).filter((a) => a.run_id === runId);
  const [shown, setShown] = useState<ChatApproval[]>([]);
  // A call decided here stays with its decision until the child's card moves on.
  const ids = new Set(waiting.map((a) => a.id));
  const kept = shown.filter((a) => !ids.has(a.id) && decidedHere.has(a.id));
  if (waiting.some((a) => !shown.some((s) => s.id === a.id))) setShown([...kept, ...waiting]);
  const calls = [...kept, ...waiting];
  if (calls.length === 0) return null;
  return (
    <div className="flex flex-col gap-2" data-testid="child-approvals">
      {calls.map((a) => (
        <ApprovalCard key={a.id} threadId={threadId} approval={a} />
      ))}
    </div>
  );
}
