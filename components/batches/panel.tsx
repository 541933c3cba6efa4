"use client";

import { QueryClient, QueryClientProvider, useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useMemo, useRef, useState } from "react";
import { type BatchProjection, clampProgress } from "@/lib/api/batches";
import {
  batchStatusText,
  executedCount,
  isActiveBatch,
  progressSplit,
  pushSample,
  type RateSample,
} from "@/lib/batches-ui";
import { ApiError, fetchBatches, fetchFeatures } from "./api";
import { BatchDetail } from "./detail";
import { NewBatchDialog } from "./new-batch-dialog";
import { ACTIVE_POLL_MS, FEATURES_POLL_MS, IDLE_POLL_MS, NO_WORKER_TITLE } from "./shared";
import { batchIdFromHash, onBatchAnnounced, onBatchFocus, onNewBatchRequest, publishBatches } from "./store";
import { buttonClass, ProgressBar, StatusBadge, shortId } from "./ui";


function makeClient() {
  return new QueryClient({
    defaultOptions: {
      queries: {
        staleTime: 1_000,
        // A 4xx will not fix itself; a network blip might.
        retry: (count, err) => !(err instanceof ApiError && err.status >= 400 && err.status < 500) && count < 2,
      },
    },
  });
}

/**
 * The batch panel of one thread. Feature-gated by /api/features: with a live worker it is
 * shown on every thread; without one only on threads that have batch history, read-only;
 * otherwise it renders nothing.
 */
export function BatchPanel({ threadId }: { threadId: string }) {
  const [client] = useState(makeClient);
  return (
    <QueryClientProvider client={client}>
      <PanelGate key={threadId} threadId={threadId} />
    </QueryClientProvider>
  );
}

function byNewest(a: BatchProjection, b: BatchProjection) {
  return b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id);
}
/** Stable reference, so React Query keeps the selected result between unchanged polls. */
const newestFirst = (list: BatchProjection[]) => [...list].sort(byNewest);

function PanelGate({ threadId }: { threadId: string }) {
  const features = useQuery({
    queryKey: ["features"],
    queryFn: ({ signal }) => fetchFeatures(signal),
    refetchInterval: FEATURES_POLL_MS,
  });
  const sqlAvailable = features.data?.sql_repository.available ?? false;
  const workerAlive = !!features.data?.worker_runtime.alive && !!features.data?.batches.enabled;
  const batches = useQuery({
    queryKey: ["batches", threadId],
    queryFn: ({ signal }) => fetchBatches(threadId, signal),
    enabled: sqlAvailable,
    refetchInterval: (q) => (q.state.data?.some((b) => isActiveBatch(b.status)) ? ACTIVE_POLL_MS : IDLE_POLL_MS),
    select: newestFirst,
  });

  if (!features.data || !sqlAvailable || !batches.data) return null;
  const hasHistory = batches.data.length > 0;
  if (!workerAlive && !hasHistory) return null;
  return (
    <PanelBody threadId={threadId} batches={batches.data} workerAlive={workerAlive} dataUpdatedAt={batches.dataUpdatedAt} />
  );
}

function PanelBody({
  threadId,
  batches,
  workerAlive,
  dataUpdatedAt,
}: {
  threadId: string;
  batches: BatchProjection[];
  workerAlive: boolean;
  dataUpdatedAt: number;
}) {
  const qc = useQueryClient();
  const [selectedId, setSelectedId] = useState<string | null>(null);
  const [collapsed, setCollapsed] = useState(false);
  const [newOpen, setNewOpen] = useState(false);
  const rootRef = useRef<HTMLElement>(null);
  const bodyId = useId();
  const headingId = useId();
  const samples = useRef(new Map<string, RateSample[]>());

  const known = useMemo(() => new Set(batches.map((b) => b.id)), [batches]);
  const knownRef = useRef(known);
  knownRef.current = known;
  const active = batches.filter((b) => isActiveBatch(b.status));
  const selected =
    batches.find((b) => b.id === selectedId) ?? active[0] ?? (batches.length > 0 ? batches[0] : undefined);

  // Rate samples come from the polls themselves (no extra requests).
  useEffect(() => {
    for (const b of batches) {
      if (b.status !== "running") {
        samples.current.delete(b.id);
        continue;
      }
      const prev = samples.current.get(b.id) ?? [];
      if (prev[prev.length - 1]?.at === dataUpdatedAt) continue;
      samples.current.set(b.id, pushSample(prev, { at: dataUpdatedAt, done: executedCount(b) }));
    }
    publishBatches(batches);
  }, [batches, dataUpdatedAt]);

  // The chat's "New batch from a file" example opens the dialog here (only with a live worker).
  useEffect(
    () =>
      workerAlive
        ? onNewBatchRequest(() => {
            setCollapsed(false);
            setNewOpen(true);
          })
        : undefined,
    [workerAlive],
  );

  // Receipt cards and #batch-<id> links select a batch here.
  useEffect(() => {
    const focus = (id: string) => {
      setSelectedId(id);
      setCollapsed(false);
      if (!knownRef.current.has(id)) void qc.invalidateQueries({ queryKey: ["batches", threadId] });
      requestAnimationFrame(() => {
        rootRef.current?.scrollIntoView({ block: "nearest", behavior: "smooth" });
        document.getElementById(`batch-detail-${id}`)?.focus({ preventScroll: true });
      });
    };
    const fromHash = () => {
      const id = batchIdFromHash(window.location.hash);
      if (id) focus(id);
    };
    fromHash();
    window.addEventListener("hashchange", fromHash);
    const offFocus = onBatchFocus(focus);
    const offAnnounce = onBatchAnnounced((id) => {
      if (!knownRef.current.has(id)) void qc.invalidateQueries({ queryKey: ["batches", threadId] });
    });
    return () => {
      window.removeEventListener("hashchange", fromHash);
      offFocus();
      offAnnounce();
    };
  }, [qc, threadId]);

  return (
    <aside
      ref={rootRef}
      aria-labelledby={headingId}
      data-testid="batch-panel"
      data-mode={workerAlive ? "live" : "read-only"}
      className="@container flex min-w-0 flex-col bg-white text-sm"
    >
      <header className="flex min-h-14 flex-wrap items-center gap-2 border-b border-zinc-200 px-4 py-2">
        <button
          type="button"
          aria-expanded={!collapsed}
          aria-controls={bodyId}
          onClick={() => setCollapsed((c) => !c)}
          className="-ml-1 inline-flex items-center gap-1 rounded px-1 py-0.5 focus-visible:outline-2 focus-visible:outline-sky-600"
        >
          <svg aria-hidden viewBox="0 0 16 16" className={`size-4 transition-transform ${collapsed ? "-rotate-90" : ""}`}>
            <path d="M4 6l4 4 4-4" fill="none" stroke="currentColor" strokeWidth="1.75" />
          </svg>
          <h2 id={headingId} className="text-base font-semibold">
            Batches
          </h2>
        </button>
        <span
          data-testid="active-count"
          className="rounded-full bg-zinc-100 px-2 py-0.5 text-xs font-medium text-zinc-700 tabular-nums"
        >
          {active.length} active
        </span>
        <span className="ml-auto" title={workerAlive ? undefined : NO_WORKER_TITLE}>
          <button
            type="button"
            className={`${buttonClass.base} ${buttonClass.primary}`}
            disabled={!workerAlive}
            onClick={() => setNewOpen(true)}
          >
            New batch
          </button>
        </span>
      </header>

      <div id={bodyId} hidden={collapsed} className="flex min-w-0 flex-col">
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
            samples={samples.current.get(selected.id) ?? []}
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
              className={`grid w-full grid-cols-[auto_1fr_auto] items-center gap-x-2 px-3 py-1.5 text-left focus-visible:outline-2 focus-visible:-outline-offset-2 focus-visible:outline-sky-600 ${current ? "bg-sky-50" : "hover:bg-zinc-50"}`}
            >
              <span className="font-mono text-xs text-zinc-700">{shortId(b.id)}</span>
              <ProgressBar
                value={clampProgress(b.terminal, b.total)}
                status={b.status}
                tone={batchStatusText(b.status, b.counts).tone === "warn" ? "warn" : undefined}
                size="sm"
              />
              <span className="flex items-center gap-2">
                <span className="text-right text-xs text-zinc-600 tabular-nums" title={progressSplit(b.total, b.counts)}>
                  {b.counts.succeeded.toLocaleString("en-US")}/{b.total.toLocaleString("en-US")}
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
