"use client";

import { useSyncExternalStore } from "react";
import type { BatchProjection } from "@/lib/api/batches";

/**
 * A tiny shared store between the chat transcript and the batch panel: receipt cards ask
 * the panel to show a batch, and read its live status from the panel's last poll (so cards
 * add no requests of their own).
 */

type FocusListener = (batchId: string) => void;
const focusListeners = new Set<FocusListener>();

/** Ask the panel to select, expand and scroll to a batch. */
export function requestBatchFocus(batchId: string): void {
  for (const l of focusListeners) l(batchId);
}

export function onBatchFocus(listener: FocusListener): () => void {
  focusListeners.add(listener);
  return () => focusListeners.delete(listener);
}

type AnnounceListener = (batchId: string) => void;
const announceListeners = new Set<AnnounceListener>();

/** A receipt for this batch appeared in the transcript; the panel refetches if it does not know it yet. */
export function announceBatch(batchId: string): void {
  for (const l of announceListeners) l(batchId);
}

export function onBatchAnnounced(listener: AnnounceListener): () => void {
  announceListeners.add(listener);
  return () => announceListeners.delete(listener);
}

/** `#batch-<id>` links select a batch in the panel. */
export const batchHash = (batchId: string) => `#batch-${batchId}`;
export function batchIdFromHash(hash: string): string | null {
  const m = /^#batch-([A-Za-z0-9-]+)$/.exec(hash);
  return m ? m[1] : null;
}

let snapshot: ReadonlyMap<string, BatchProjection> = new Map();
const liveListeners = new Set<() => void>();

export function publishBatches(batches: readonly BatchProjection[]): void {
  let changed = batches.length !== snapshot.size;
  for (const b of batches) {
    const old = snapshot.get(b.id);
    if (
      !old ||
      old.status !== b.status ||
      old.terminal !== b.terminal ||
      old.total !== b.total ||
      old.waiting_reason !== b.waiting_reason
    )
      changed = true;
  }
  if (!changed) return;
  snapshot = new Map(batches.map((b) => [b.id, b]));
  for (const l of liveListeners) l();
}

function subscribe(l: () => void) {
  liveListeners.add(l);
  return () => liveListeners.delete(l);
}

/** The panel's latest view of a batch, if it has one. */
export function useLiveBatch(batchId: string | null): BatchProjection | undefined {
  return useSyncExternalStore(
    subscribe,
    () => (batchId ? snapshot.get(batchId) : undefined),
    () => undefined,
  );
}

/** Every batch of the panel's latest poll (the chat watches them for wake-up replies). */
export function useLiveBatches(): ReadonlyMap<string, BatchProjection> {
  return useSyncExternalStore(
    subscribe,
    () => snapshot,
    () => EMPTY,
  );
}
const EMPTY: ReadonlyMap<string, BatchProjection> = new Map();

type NewBatchListener = () => void;
const newBatchListeners = new Set<NewBatchListener>();

/** Ask the panel to open the New batch dialog; false when no panel can (no worker runs). */
export function requestNewBatch(): boolean {
  for (const l of newBatchListeners) l();
  return newBatchListeners.size > 0;
}

export function onNewBatchRequest(listener: NewBatchListener): () => void {
  newBatchListeners.add(listener);
  return () => newBatchListeners.delete(listener);
}
