"use client";

import { useQuery } from "@tanstack/react-query";
import type { BatchProjection, Features } from "@/lib/api/batches";
import { formatCount, formatTime } from "@/lib/format";
import { fetchBatch, fetchFeatures } from "./api";
import { batchKeys, retryUnlessClientError, workerIsAlive } from "./panel-state";
import { ResultsSection } from "./results";
import { ACTIVE_POLL_MS, FEATURES_POLL_MS, IDLE_POLL_MS } from "./shared";
import { isActiveBatch, progressSplit } from "./status";
import { filterQuery, type TableFilter } from "./toolbar";
import { StatusBadge } from "./ui";

/**
 * A batch's Results on a page of their own, at the screen's width: the panel's view (filters,
 * the checks' pass rates, Retry failed checks, downloads, the table and Load more), kept live
 * by the same polls. The filters live in the address, so a reload or a shared link keeps them.
 */
export function BatchResultsPage({
  threadId,
  initialBatch,
  initialFeatures,
  initialFilter,
}: {
  threadId: string;
  initialBatch: BatchProjection;
  initialFeatures: Features;
  initialFilter: TableFilter;
}) {
  const features = useQuery({
    queryKey: batchKeys.features,
    queryFn: ({ signal }) => fetchFeatures(signal),
    initialData: initialFeatures,
    refetchInterval: FEATURES_POLL_MS,
    retry: retryUnlessClientError,
  });
  const { data: batch } = useQuery({
    queryKey: batchKeys.batch(threadId, initialBatch.id),
    queryFn: ({ signal }) => fetchBatch(threadId, initialBatch.id, signal),
    initialData: initialBatch,
    refetchInterval: (q) => (q.state.data && isActiveBatch(q.state.data.status) ? ACTIVE_POLL_MS : IDLE_POLL_MS),
    retry: retryUnlessClientError,
  });
  return (
    <div data-testid="results-page" data-batch-id={batch.id} data-status={batch.status} className="flex min-w-0 flex-col gap-3">
      <p className="flex flex-wrap items-center gap-x-3 gap-y-1 text-xs text-zinc-600">
        <StatusBadge status={batch.status} counts={batch.counts} />
        <span data-testid="progress-text" className="tabular-nums">
          {progressSplit(batch.total, batch.counts)}
        </span>
        <span>
          sub-agent <span className="font-medium text-zinc-800">{batch.subagent}</span>
        </span>
        <span className="tabular-nums">
          {formatCount(batch.total)} {batch.total === 1 ? "item" : "items"}
        </span>
        <span className="tabular-nums">created {formatTime(batch.created_at)}</span>
      </p>
      <ResultsSection
        threadId={threadId}
        batch={batch}
        workerAlive={workerIsAlive(features.data)}
        page={{
          initialFilter,
          onFilter: (filter) => window.history.replaceState(null, "", `${window.location.pathname}${filterQuery(filter)}`),
        }}
      />
    </div>
  );
}
