"use client";

import { useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useMemo, useRef, useState } from "react";
import { CollapsibleHeader, CountPill, useFold } from "@/components/ui/collapsible-header";
import type { BatchProjection } from "@/lib/api/batches";
import { fetchBatches, fetchFeatures } from "./api";
import { BatchDetail } from "./detail";
import { NewBatchDialog } from "./new-batch/dialog";
import { batchIdFromHash, batchKeys, retryUnlessClientError, usePanelRequest, workerIsAlive } from "./panel-state";
import { ACTIVE_POLL_MS, FEATURES_POLL_MS, IDLE_POLL_MS, NO_WORKER_TITLE } from "./shared";
import { barProgress, batchStatusText, isActiveBatch, progressSplit } from "./status";
import { formatCount } from "@/lib/format";
import { ProgressBar, StatusBadge, shortId } from "./ui";
import { buttonClasses } from "@/components/ui/button";

/**
 * The batch panel of one thread. Feature-gated by /api/features: with a live worker it is
 * shown on every thread; without one only on threads that have batch history, read-only;
 * otherwise it renders nothing. Its queries live in the app's one React Query cache.
 */
export function BatchPanel({ threadId }: { threadId: string }) {
  return <PanelGate key={threadId} threadId={threadId} />;
}

function byNewest(a: BatchProjection, b: BatchProjection) {
  return b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id);
}
/** Stable reference, so React Query keeps the selected result between unchanged polls. */
const newestFirst = (list: BatchProjection[]) => [...list].sort(byNewest);

function PanelGate({ threadId }: { threadId: string }) {
  const features = useQuery({
    queryKey: batchKeys.features,
    queryFn: ({ signal }) => fetchFeatures(signal),
    refetchInterval: FEATURES_POLL_MS,
    retry: retryUnlessClientError,
  });
  const sqlAvailable = features.data?.sql_repository.available ?? false;
  const workerAlive = workerIsAlive(features.data);
  const batches = useQuery({
    queryKey: batchKeys.list(threadId),
    queryFn: ({ signal }) => fetchBatches(threadId, signal),
    enabled: sqlAvailable,
    retry: retryUnlessClientError,
    refetchInterval: (q) => (q.state.data?.some((b) => isActiveBatch(b.status)) ? ACTIVE_POLL_MS : IDLE_POLL_MS),
    select: newestFirst,
  });

  if (!features.data || !sqlAvailable || !batches.data) return null;
  const hasHistory = batches.data.length > 0;
  if (!workerAlive && !hasHistory) return null;
  return (
    <PanelBody threadId={threadId} batches={batches.data} workerAlive={workerAlive} />
  );
}

function PanelBody({
  threadId,
  batches,
  workerAlive,
}: {
  threadId: string;
  batches: BatchProjection[];
  workerAlive: boolean;
}) {
  const qc = useQueryClient();
  const [selectedId, setSelectedId] = useState<string | null>(null);
  const fold = useFold();
  const [newOpen, setNewOpen] = useState(false);
  const rootRef = useRef<HTMLElement>(null);

  const known = useMemo(() => new Set(batches.map((b) => b.id)), [batches]);
  const knownRef = useRef(known);
  knownRef.current = known;
  const active = batches.filter((b) => isActiveBatch(b.status));
  const selected =
    batches.find((b) => b.id === selectedId) ?? active[0] ?? (batches.length > 0 ? batches[0] : undefined);

  const focus = (id: string) => {
    setSelectedId(id);
    fold.setCollapsed(false);
    if (!knownRef.current.has(id)) void qc.invalidateQueries({ queryKey: batchKeys.list(threadId) });
    requestAnimationFrame(() => {
      rootRef.current?.scrollIntoView({ block: "nearest", behavior: "smooth" });
      document.getElementById(`batch-detail-${id}`)?.focus({ preventScroll: true });
    });
  };
  const focusRef = useRef(focus);
  focusRef.current = focus;

  // Receipt cards and the chat's "New batch from a file" example ask here.
  usePanelRequest(threadId, (request) => {
    if (request.kind === "focus") focusRef.current(request.batchId);
    else if (workerAlive) {
      fold.setCollapsed(false);
      setNewOpen(true);
    }
  });

  // #batch-<id> links select a batch here.
  useEffect(() => {
    const fromHash = () => {
      const id = batchIdFromHash(window.location.hash);
      if (id) focusRef.current(id);
    };
    fromHash();
    window.addEventListener("hashchange", fromHash);
    return () => window.removeEventListener("hashchange", fromHash);
  }, []);

  return (
    <aside
      ref={rootRef}
      aria-labelledby={fold.headingId}
      data-testid="batch-panel"
      data-mode={workerAlive ? "live" : "read-only"}
      className="@container flex min-w-0 flex-col bg-white text-sm"
    >
      <CollapsibleHeader title="Batches" fold={fold} className="border-b">
        <CountPill testId="active-count">{active.length} active</CountPill>
        <span className="ml-auto" title={workerAlive ? undefined : NO_WORKER_TITLE}>
          <button
            type="button"
            className={buttonClasses("primary", "sm")}
            disabled={!workerAlive}
            onClick={() => setNewOpen(true)}
          >
            New batch
          </button>
        </span>
      </CollapsibleHeader>

      <div id={fold.bodyId} hidden={fold.collapsed} className="flex min-w-0 flex-col">
        {!workerAlive ? (
          <p
            role="note"
            data-testid="read-only-note"
            className="border-b border-amber-200 bg-amber-50 px-3 py-2 text-xs text-amber-900"
          >
            No worker is running, so this panel is read-only: items and results can be inspected and downloaded, but
            controls are disabled until a worker starts (<code className="font-mono">npm run worker</code>).
          </p>
        ) : null}

        {batches.length === 0 ? (
          <p className="px-3 py-6 text-center text-zinc-600">
            No batches on this thread yet. Start one with <strong>New batch</strong>, or ask the agent in the chat.
          </p>
        ) : null}

        {batches.length > 1 ? (
          <BatchList batches={batches} selectedId={selected?.id ?? null} onSelect={setSelectedId} />
        ) : null}

        {selected ? (
          <BatchDetail
            key={selected.id}
            threadId={threadId}
            batch={selected}
            workerAlive={workerAlive}
          />
        ) : null}
      </div>

      {newOpen ? (
        <NewBatchDialog
          threadId={threadId}
          onClose={() => setNewOpen(false)}
          onCreated={(b) => {
            setSelectedId(b.id);
            setNewOpen(false);
          }}
        />
      ) : null}
    </aside>
  );
}

function BatchList({
  batches,
  selectedId,
  onSelect,
}: {
  batches: BatchProjection[];
  selectedId: string | null;
  onSelect: (id: string) => void;
}) {
  return (
    <ul aria-label="Batches on this thread" className="max-h-48 overflow-y-auto border-b border-zinc-200 py-1">
      {batches.map((b) => {
        const current = b.id === selectedId;
        return (
          <li key={b.id}>
            <button
              type="button"
              aria-current={current ? "true" : undefined}
              onClick={() => onSelect(b.id)}
              title={`Batch ${b.id}`}
              className={`grid w-full grid-cols-[minmax(0,1fr)_4rem_auto] items-center gap-x-2 px-3 py-1.5 text-left focus-visible:outline-2 focus-visible:-outline-offset-2 focus-visible:outline-sky-600 ${current ? "bg-sky-50" : "hover:bg-zinc-50"}`}
            >
              {/* Named by title, as people know them; a variant says what it re-runs. */}
              <span className="min-w-0 text-xs">
                <span data-testid="batch-list-title" className="block truncate text-zinc-800">
                  {b.title}
                </span>
                {b.variant_of ? (
                  <span data-testid="batch-list-variant-of" className="block truncate text-[11px] text-zinc-500">
                    variant of {b.variant_of_title ?? shortId(b.variant_of)}
                  </span>
                ) : null}
              </span>
              <ProgressBar
                value={barProgress(b)}
                status={b.status}
                tone={batchStatusText(b.status, b.counts).tone === "warn" ? "warn" : undefined}
                size="sm"
              />
              <span className="flex items-center gap-2">
                <span className="text-right text-xs text-zinc-600 tabular-nums" title={progressSplit(b.total, b.counts)}>
                  {formatCount(b.counts.succeeded)}/{formatCount(b.total)}
                </span>
                <StatusBadge status={b.status} counts={b.counts} className="justify-center" />
              </span>
            </button>
          </li>
        );
      })}
    </ul>
  );
}
