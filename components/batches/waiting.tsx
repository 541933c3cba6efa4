import type { BatchProjection } from "@/lib/api/batches";
import { formatCount, formatDuration, formatTime, formatUsd } from "@/lib/format";
import { projectFromPilot, projectionSentence } from "@/lib/pilot-projection";

/** Why a batch waits, in words, and the server's ETA from recent completions. */

/** One sentence: "Waiting: …", or null while items move. */
export function waitingText(b: BatchProjection): string | null {
  switch (b.waiting_reason) {
    case "paused":
      if (b.pause_reason === "pilot") return pilotText(b);
      return "Waiting: paused — resume to continue.";
    case "budget":
      if (b.pause_reason === "quota") return "Waiting: budget — your daily token quota is used up; resume after 00:00 UTC.";
      return `Waiting: budget — ${budgetUsage(b)}; raise the budget, then resume.`;
    case "no_worker":
      return b.waiting_since
        ? `Waiting: no worker has been alive since ${formatTime(b.waiting_since)} — start one with \`npm run worker\`.`
        : "Waiting: no worker is running — start one with `npm run worker`.";
    case "rate_limited":
      // At the provider's limit items still move: say how fast, and when it ends.
      if (b.eta)
        return `Waiting on the provider's limit: running at ${formatCount(b.eta.items_per_minute)} items/min, about ${formatDuration(b.eta.eta_seconds * 1000)} left.`;
      return `Waiting: rate limited by the model provider${b.waiting_until ? ` until ${formatTime(b.waiting_until)}` : ""}.`;
    case "capacity":
      return "Waiting: every worker slot is busy with other work; items start as slots free up.";
    default:
      return null;
  }
}

/** A batch its pilot paused: what ran, what the whole batch will cost at the pilot's rate, and what resuming does. */
function pilotText(b: BatchProjection): string {
  const ran = b.pilot ?? b.terminal;
  const rest = b.total - b.terminal;
  const projection = projectFromPilot({ total: b.total, succeeded: b.counts.succeeded, failed: b.counts.failed, costUsd: b.cost_usd });
  const projected = projection ? ` ${projectionSentence(b.total, projection)}` : "";
  return `Paused after its pilot: the first ${formatCount(ran)} ${ran === 1 ? "item" : "items"} ran — check their results.${projected} Resume runs the other ${formatCount(rest)} ${rest === 1 ? "item" : "items"}.`;
}

/**
 * What limits how many of the batch's items run at once, and the setting that would raise it,
 * while it has items waiting for a slot: the workers' slots in all (subagent_runtime.max_running
 * each, shared by every batch) or the batch's own max_running_items. Null otherwise.
 */
export function concurrencyText(b: BatchProjection): string | null {
  if (b.status !== "running" || b.worker_slots === null || b.counts.queued + b.counts.pending === 0) return null;
  const running = b.counts.leased + b.counts.running;
  const head = `Running ${formatCount(running)} of ${formatCount(b.max_running_items)} at a time`;
  if (b.worker_slots < b.max_running_items)
    return `${head}: the workers have ${formatCount(b.worker_slots)} ${b.worker_slots === 1 ? "slot" : "slots"} in all, shared by every batch. To run more at once, raise subagent_runtime.max_running (each worker's slots) or start another worker.`;
  return `${head}: this batch's max_running_items. A new batch can ask for more (Max running items in New batch; the default is subagent_batches.default_max_running_items).`;
}

/** "Waiting for your approval: …" while items hold a tool call for a person, else null. */
export function approvalWaitingText(b: BatchProjection): string | null {
  const n = b.counts.awaiting_approval;
  if (!n) return null;
  return `Waiting for your approval: ${formatCount(n)} ${n === 1 ? "item wants" : "items want"} to call a tool — Approve or Deny in the batch panel.`;
}

/** "1,200 of 5,000 tokens used, $0.0100 of $1.00 spent". */
export function budgetUsage(b: BatchProjection): string {
  const parts: string[] = [];
  if (b.budget.max_total_tokens !== null)
    parts.push(`${formatCount(b.budget.used_tokens)} of ${formatCount(b.budget.max_total_tokens)} tokens used`);
  if (b.budget.max_cost_usd !== null) parts.push(`${formatUsd(b.budget.used_cost_usd)} of ${formatUsd(b.budget.max_cost_usd)} spent`);
  return parts.join(", ") || "budget reached";
}

const TONE: Record<string, string> = {
  paused: "bg-amber-50 text-amber-900 ring-amber-200",
  budget: "bg-amber-50 text-amber-900 ring-amber-200",
  no_worker: "bg-red-50 text-red-900 ring-red-200",
  rate_limited: "bg-sky-50 text-sky-900 ring-sky-200",
  capacity: "bg-zinc-50 text-zinc-800 ring-zinc-200",
};

/** The panel's waiting banner. */
export function WaitingNotice({ batch }: { batch: BatchProjection }) {
  const text = waitingText(batch);
  if (!text) return null;
  return (
    <p
      data-testid="batch-waiting"
      data-reason={batch.waiting_reason ?? undefined}
      role="status"
      className={`rounded-md px-2 py-1.5 text-xs ring-1 ring-inset ${TONE[batch.waiting_reason ?? ""] ?? TONE.capacity}`}
    >
      {text}
    </p>
  );
}

/** Throughput and ETA from recent completions; a rate-limited batch with none shows when the limit lifts. */
export function etaText(b: BatchProjection): { throughput: string; eta: string } {
  if (b.waiting_reason === "rate_limited" && !b.eta)
    return { throughput: "rate limited", eta: b.waiting_until ? `after ${formatTime(b.waiting_until)}` : "—" };
  if (b.waiting_reason === "rate_limited" && b.eta)
    return { throughput: `${b.eta.items_per_minute}/min (provider's limit)`, eta: formatDuration(b.eta.eta_seconds * 1000) };
  if (!b.eta) return { throughput: "—", eta: "—" };
  return { throughput: `${b.eta.items_per_minute}/min`, eta: formatDuration(b.eta.eta_seconds * 1000) };
}
