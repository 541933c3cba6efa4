"use client";

import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useRef } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { isActiveBatch } from "@/components/batches/status";
import { errorMessage } from "../batches/shared";
import { FileDownload } from "./section";
import { batchArtifactsKey, fetchBatchArtifacts, filesKey, formatBytes } from "./api";

/**
 * Items write while the batch runs, so a running batch's artifacts are read again, slowly (the
 * panel's own list poll stays the only steady request); the status in the query key reads them
 * once more when the batch ends. A finished batch's artifacts only change by hand.
 */
const ARTIFACTS_POLL_MS = 30_000;

/**
 * The files a batch wrote (its item runs' artifacts) in the batch detail, each with a download
 * link. Nothing is shown for a batch that wrote none, so batches without tools look as before.
 */
export function BatchArtifacts({ threadId, batch }: { threadId: string; batch: BatchProjection }) {
  const headingId = useId();
  const qc = useQueryClient();
  const active = isActiveBatch(batch.status);
  const artifacts = useQuery({
    // The status in the key fetches once more when the batch ends (its last items' files).
    queryKey: [...batchArtifactsKey(threadId, batch.id), batch.status],
    queryFn: ({ signal }) => fetchBatchArtifacts(threadId, batch.id, signal),
    refetchInterval: active ? ARTIFACTS_POLL_MS : false,
  });
  // New or rewritten artifacts are new files of the thread: the Files section reads its list again.
  const signature = artifacts.data?.map((f) => `${f.path}:${f.size}:${f.created_at}`).join("\n");
  const seen = useRef<string | undefined>(undefined);
  useEffect(() => {
    if (signature === undefined) return;
    if (seen.current !== undefined && seen.current !== signature)
      void qc.invalidateQueries({ queryKey: filesKey(threadId), exact: true });
    seen.current = signature;
  }, [signature, threadId, qc]);
  if (artifacts.isError)
    return (
      <p role="alert" className="text-xs text-red-700">
        Artifacts: {errorMessage(artifacts.error)}
      </p>
    );
  const list = artifacts.data ?? [];
  if (list.length === 0) return null;
  return (
    <section aria-labelledby={headingId} data-testid="batch-artifacts" className="flex min-w-0 flex-col gap-1">
      <h4 id={headingId} className="text-xs font-semibold uppercase tracking-wide text-zinc-600">
        Artifacts <span className="font-medium normal-case tracking-normal text-zinc-500">· {list.length} written by this batch</span>
      </h4>
      <ul aria-label="Files this batch wrote" className="divide-y divide-zinc-100 rounded-md border border-zinc-200">
        {list.map((f) => {
          return (
            <li key={f.path} data-testid="artifact-row" data-path={f.path} className="flex items-center gap-2 px-2 py-1">
              <span className="min-w-0 flex-1 truncate font-mono text-xs text-zinc-900" title={f.path}>
                {f.path}
              </span>
              <span className="shrink-0 text-xs text-zinc-500 tabular-nums">{formatBytes(f.size)}</span>
              <FileDownload threadId={threadId} path={f.path} />
            </li>
          );
        })}
      </ul>
    </section>
  );
}
