import type { BatchProjection, ProviderBatchView } from "@/lib/api/batches";
import { formatCount } from "@/lib/format";
import { shortId } from "./ui";

/** The provider batch states in the panel's words, and what each means on hover. */
const STATES: Record<ProviderBatchView["state"], { label: string; title: string }> = {
  submitting: { label: "Sending", title: "The worker is building the requests and sending them to the provider" },
  in_progress: { label: "At the provider", title: "The provider is running the requests; a worker polls it" },
  canceling: { label: "Cancelling", title: "Cancelled here; the provider is stopping what it has not run (finished answers are kept)" },
  ended: { label: "Collecting", title: "The provider finished; its answers are being settled" },
  settled: { label: "Done", title: "Every answer of this provider batch is settled" },
  abandoned: { label: "Re-sent", title: "Never reached the provider; its items went back to the queue" },
};

const PROVIDERS: Record<ProviderBatchView["provider"], string> = { openai: "OpenAI Batch", anthropic: "Anthropic Message Batches" };

/** The lane (live, or the provider's batch API) and, on the provider lane, each provider batch's state and counts. */
export function LaneSection({ batch }: { batch: BatchProjection }) {
  if (batch.lane !== "provider_batch") return null;
  const pbs = batch.provider_batches;
  return (
    <section data-testid="batch-lane" aria-label="Provider batch lane" className="flex min-w-0 flex-col gap-1.5 rounded-md border border-zinc-200 px-2.5 py-2 text-xs">
      <p className="text-zinc-700">
        <span className="font-medium text-zinc-900">Provider batch lane</span>: items go through{" "}
        {pbs[0] ? PROVIDERS[pbs[0].provider] : "the provider's batch API"} at the batch price, and wait there without using a
        running slot.
      </p>
      {pbs.length === 0 ? (
        <p className="text-zinc-500">Nothing sent yet.</p>
      ) : (
        <ul className="flex min-w-0 flex-col gap-1">
          {pbs.map((pb) => (
            <li key={pb.id} data-testid="provider-batch" data-state={pb.state} className="flex min-w-0 flex-wrap items-baseline gap-x-2 gap-y-0.5 tabular-nums">
              <span className="font-mono text-zinc-600">{shortId(pb.id)}</span>
              <span title={STATES[pb.state].title} className="cursor-help font-medium text-zinc-900">
                {STATES[pb.state].label}
              </span>
              <span className="text-zinc-600">
                {formatCount(pb.counts.requests)} sent · {formatCount(pb.counts.succeeded)} answered
                {pb.counts.errored > 0 ? <span className="text-red-700"> · {formatCount(pb.counts.errored)} errored</span> : null}
                {pb.counts.expired > 0 ? ` · ${formatCount(pb.counts.expired)} expired` : null}
                {pb.counts.cancelled > 0 ? ` · ${formatCount(pb.counts.cancelled)} cancelled` : null}
              </span>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
