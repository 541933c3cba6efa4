"use client";

import { useBatchPanelRequests } from "@/components/batches/panel-state";
import type { ToolPartProps } from "./part-props";
import { StatusBadge } from "@/components/batches/ui";
import { batchStatusSchema } from "@/lib/api/batches";
import { progressSplit } from "@/components/batches/status";
import { Spinner } from "@/components/ui/spinner";

/** One batch as the `batch_status` tool reports it (compactBatch in server/agent/tools/batch.ts). */
interface CompactBatch {
  batch_id: string;
  status: string;
  total: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  running: number;
  waiting: number;
}

const rec = (v: unknown): Record<string, unknown> | null =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;

export function readBatchStatus(output: unknown): { batches: CompactBatch[]; error: string | null } {
  const out = rec(output);
  const error = typeof out?.error === "string" ? out.error : null;
  const list = Array.isArray(out?.batches) ? out.batches : [];
  const batches = list.filter((b): b is CompactBatch => {
    const r = rec(b);
    return typeof r?.batch_id === "string" && typeof r.total === "number";
  });
  return { batches, error };
}

/** The `tool-batch_status` card: one compact line per batch (status in words, done / total with the split). */
export function BatchStatusCard({ part, threadId }: ToolPartProps) {
  const { focusBatch } = useBatchPanelRequests(threadId);
  const done = part.state === "output-available";
  const { batches, error } = readBatchStatus(done ? part.output : undefined);
  return (
    <section
      data-testid="batch-status-card"
      aria-label="Batch status"
      className="my-1 flex max-w-md flex-col gap-1.5 rounded-lg border border-zinc-200 bg-white px-3 py-2 text-sm shadow-xs"
    >
      <header className="flex items-center gap-2 font-medium">
        Batch status {!done && part.state !== "output-error" ? <Spinner className="size-3 text-zinc-500" /> : null}
      </header>
      {part.state === "output-error" || error ? (
        <p className="text-xs text-red-700">{part.state === "output-error" ? part.errorText : error}</p>
      ) : done && batches.length === 0 ? (
        <p className="text-xs text-zinc-600">No batches on this thread yet.</p>
      ) : (
        <ul className="space-y-1">
          {batches.map((b) => {
            const status = batchStatusSchema.safeParse(b.status);
            return (
              <li key={b.batch_id} className="flex flex-wrap items-center gap-x-2 gap-y-0.5 text-xs">
                <a
                  href={`#batch-${b.batch_id}`}
                  onClick={() => focusBatch(b.batch_id)}
                  className="font-mono text-sky-800 underline underline-offset-2"
                >
                  {b.batch_id.slice(0, 8)}
                </a>
                {status.success ? <StatusBadge status={status.data} counts={b} /> : null}
                <span className="tabular-nums text-zinc-600">{progressSplit(b.total, b)}</span>
                {b.running || b.waiting ? (
                  <span className="tabular-nums text-zinc-500">
                    ({b.running} in progress, {b.waiting} not started)
                  </span>
                ) : null}
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}
