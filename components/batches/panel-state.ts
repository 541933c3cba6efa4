"use client";

import { type QueryClient, skipToken, useQuery, useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef } from "react";
import type { BatchProjection, Features } from "@/lib/api/batches";
import { ApiError } from "@/lib/api/client";
import { fetchBatches } from "./api";

/**
 * The batch panel's state in the app's one React Query cache: the keys every batch query
 * uses, passive reads of the panel's last poll (receipt cards and the chat add no requests),
 * and the chat's requests to the panel ("show this batch", "open New batch"), kept as a
 * never-fetched query so the chat, the thread view and the panel read one place.
 */

export const batchKeys = {
  features: ["features"] as const,
  list: (threadId: string) => ["batches", threadId] as const,
  /** One batch on its own (the full-width results page); under the list's key, so what refreshes the list refreshes it. */
  batch: (threadId: string, batchId: string) => ["batches", threadId, batchId] as const,
  items: (threadId: string, batchId: string) => ["items", threadId, batchId] as const,
  notifications: ["batch-notifications"] as const,
  panelRequest: (threadId: string) => ["batch-panel-request", threadId] as const,
  chatLook: (threadId: string) => ["chat-look-request", threadId] as const,
};

/** A 4xx will not fix itself; a network blip might. */
export function retryUnlessClientError(count: number, err: unknown): boolean {
  return !(err instanceof ApiError && err.status >= 400 && err.status < 500) && count < 2;
}

/** Whether the panel can take controls: the features poll saw a live worker and batches on. */
export function workerIsAlive(features: Features | undefined): boolean {
  return !!features?.worker_runtime.alive && !!features?.batches.enabled;
}

/**
 * Every batch of the thread as the panel last polled it (no request of its own: disabled). It
 * names the panel's own fetch, not skipToken: a query refetched by invalidation runs the options
 * its last rendered reader gave it, and a skipToken there left "refresh the list" (after a retry,
 * a control, a submission) doing nothing until the next poll.
 */
export function useLiveBatches(threadId: string): readonly BatchProjection[] {
  return (
    useQuery<BatchProjection[]>({
      queryKey: batchKeys.list(threadId),
      queryFn: ({ signal }) => fetchBatches(threadId, signal),
      enabled: false,
    }).data ?? NONE
  );
}
const NONE: readonly BatchProjection[] = [];

/** One batch as the panel last polled it, if the panel knows it. */
export function useLiveBatch(threadId: string, batchId: string | null): BatchProjection | undefined {
  return useLiveBatches(threadId).find((b) => b.id === batchId);
}

/** A batch the chat just mentioned: refetch the panel's list if it does not know it yet. */
export function announceBatch(qc: QueryClient, threadId: string, batchId: string): void {
  const known = qc.getQueryData<BatchProjection[]>(batchKeys.list(threadId));
  if (!known?.some((b) => b.id === batchId)) void qc.invalidateQueries({ queryKey: batchKeys.list(threadId) });
}

export type PanelRequest = { seq: number } & ({ kind: "focus"; batchId: string } | { kind: "new-batch" });

function ask(qc: QueryClient, threadId: string, request: { kind: "focus"; batchId: string } | { kind: "new-batch" }) {
  qc.setQueryData<PanelRequest>(batchKeys.panelRequest(threadId), (old) => ({ ...request, seq: (old?.seq ?? 0) + 1 }));
}

/** What the chat asks of the thread's panel. */
export function useBatchPanelRequests(threadId: string) {
  const qc = useQueryClient();
  return {
    /** Select, expand and scroll to a batch (and announce it, in case the panel has not polled it yet). */
    focusBatch: (batchId: string) => {
      announceBatch(qc, threadId, batchId);
      ask(qc, threadId, { kind: "focus", batchId });
    },
    /** Open the New batch dialog; false when no panel can (no worker runs). */
    openNewBatch: (): boolean => {
      if (!workerIsAlive(qc.getQueryData<Features>(batchKeys.features))) return false;
      ask(qc, threadId, { kind: "new-batch" });
      return true;
    },
  };
}

/** Calls `handle` for each request made after this component mounted (an old one is not replayed). */
export function usePanelRequest(threadId: string, handle: (request: PanelRequest) => void): void {
  const request = useQuery<PanelRequest>({ queryKey: batchKeys.panelRequest(threadId), queryFn: skipToken }).data;
  const seen = useRef(request?.seq ?? 0);
  const handler = useRef(handle);
  handler.current = handle;
  useEffect(() => {
    if (!request || request.seq <= seen.current) return;
    seen.current = request.seq;
    handler.current(request);
  }, [request]);
}

/**
 * The panel's request to the thread's chat: look at the stored conversation again (a batch the
 * New batch dialog submitted left its receipt there). A counter, kept as a never-fetched query.
 */
export function askChatToLook(qc: QueryClient, threadId: string): void {
  qc.setQueryData<number>(batchKeys.chatLook(threadId), (n) => (n ?? 0) + 1);
}

/** Calls `handle` for each look the panel asked for after this component mounted. */
export function useChatLookRequests(threadId: string, handle: () => void): void {
  const asked = useQuery<number>({ queryKey: batchKeys.chatLook(threadId), queryFn: skipToken }).data ?? 0;
  const seen = useRef(asked);
  const handler = useRef(handle);
  handler.current = handle;
  useEffect(() => {
    if (asked <= seen.current) return;
    seen.current = asked;
    handler.current();
  }, [asked]);
}

/** `#batch-<id>` links select a batch in the panel. */
export const batchHash = (batchId: string) => `#batch-${batchId}`;
export function batchIdFromHash(hash: string): string | null {
  const m = /^#batch-([A-Za-z0-9-]+)$/.exec(hash);
  return m ? m[1] : null;
}
