"use client";

import { useQueryClient } from "@tanstack/react-query";
import { useCallback, useEffect, useRef, useState } from "react";
import type { ReviewEntry } from "@/lib/api/review-queue";
import { errorMessage } from "@/components/batches/shared";
import { Button } from "@/components/ui/button";
import { fetchReviewPage, PENDING_REVIEWS_KEY } from "./api";
import { ReviewDecision } from "./review-decision";
import { ReviewItem } from "./review-item";
import { SaveReviewedButton } from "./save-reviewed";

interface Loaded {
  entries: ReviewEntry[];
  cursor: string | null;
  /** Everything waiting (the server's count), beyond what is loaded. */
  pending: number;
}

/**
 * The person's review queue (GET /api/reviews, oldest first across their batches), one item at
 * a time. A decided item leaves the list, and so does one somebody else decided first (409);
 * the next page is read as the person nears the end of what is loaded.
 */
export function ReviewQueue() {
  const qc = useQueryClient();
  const [queue, setQueue] = useState<Loaded | null>(null);
  const [index, setIndex] = useState(0);
  const [notice, setNotice] = useState<string | null>(null);
  // The batches decided on this page, the latest first (what "Save reviewed as golden set…" offers first).
  const [decidedHere, setDecidedHere] = useState<{ id: string; title: string }[]>([]);
  const [loadError, setLoadError] = useState<string | null>(null);
  const loading = useRef(false);

  const load = useCallback(async (cursor: string | null) => {
    if (loading.current) return;
    loading.current = true;
    try {
      const page = await fetchReviewPage(cursor);
      setQueue((q) => {
        const kept = cursor && q ? q.entries : [];
        const known = new Set(kept.map((e) => e.item_id));
        return { entries: [...kept, ...page.items.filter((e) => !known.has(e.item_id))], cursor: page.next_cursor, pending: page.pending };
      });
      setLoadError(null);
    } catch (err) {
      setLoadError(errorMessage(err));
    } finally {
      loading.current = false;
    }
  }, []);

  useEffect(() => {
    void load(null);
  }, [load]);

  const count = queue?.entries.length ?? 0;
  const cursor = queue?.cursor ?? null;
  // Read ahead near the end of what is loaded; keep the position inside the list as items leave it.
  useEffect(() => {
    if (cursor && index >= count - 2) void load(cursor);
    if (count > 0 && index > count - 1) setIndex(count - 1);
  }, [cursor, count, index, load]);

  const move = useCallback(
    (delta: number) => {
      setNotice(null);
      setIndex((i) => Math.max(0, Math.min(count - 1, i + delta)));
    },
    [count],
  );

  const settle = useCallback(
    (entry: ReviewEntry, message: string) => {
      setQueue((q) => q && { ...q, entries: q.entries.filter((e) => e.item_id !== entry.item_id), pending: Math.max(0, q.pending - 1) });
      setNotice(message);
      setDecidedHere((d) => [{ id: entry.batch_id, title: entry.batch_title }, ...d.filter((b) => b.id !== entry.batch_id)]);
      void qc.invalidateQueries({ queryKey: PENDING_REVIEWS_KEY });
    },
    [qc],
  );

  if (!queue)
    return loadError ? (
      <div role="alert" className="space-y-2 rounded-lg border border-red-200 bg-red-50 p-4 text-sm text-red-800">
        <p>The review queue could not be loaded: {loadError}</p>
        <Button variant="secondary" size="sm" onClick={() => void load(null)}>
          Try again
        </Button>
      </div>
    ) : (
      <p className="text-sm text-zinc-500">Loading the review queue…</p>
    );

  const entry = queue.entries[Math.min(index, count - 1)];
  return (
    <div className="space-y-4">
      <div className="flex flex-wrap items-center justify-between gap-2">
        <p className="text-sm text-zinc-600" data-testid="review-position">
          {queue.pending} waiting for review
          {entry ? ` · item ${Math.min(index, count - 1) + 1} of ${count}${cursor ? "+" : ""} loaded` : ""}
        </p>
        <SaveReviewedButton current={entry ? { id: entry.batch_id, title: entry.batch_title } : null} seen={decidedHere} />
      </div>
      {notice ? (
        <p role="status" data-testid="review-notice" className="rounded-lg border border-sky-200 bg-sky-50 px-3 py-2 text-sm text-sky-900 wrap-anywhere">
          {notice}
        </p>
      ) : null}
      {loadError ? (
        <p role="alert" className="text-sm text-red-700">
          More of the queue could not be loaded: {loadError}
        </p>
      ) : null}
      {entry ? (
        <div className="grid min-w-0 gap-6 max-lg:pb-20 lg:grid-cols-[minmax(0,1fr)_24rem] lg:items-start">
          <ReviewItem entry={entry} />
          <ReviewDecision
            key={entry.item_id}
            entry={entry}
            onDecided={settle}
            onMove={move}
            hasPrevious={index > 0}
            hasNext={index < count - 1}
          />
        </div>
      ) : cursor ? (
        <p className="text-sm text-zinc-500">Loading more…</p>
      ) : (
        <div data-testid="review-empty" className="rounded-lg border border-dashed border-zinc-300 bg-white p-6 text-sm text-zinc-600">
          <p className="font-medium text-zinc-900">Nothing is waiting for your review.</p>
          <p className="mt-1">
            Items join this queue when they finish in a batch submitted with a review policy (for example{" "}
            <code className="font-mono text-xs">{'review: { when: "failed" }'}</code>), or when one is sent for review by hand.
          </p>
        </div>
      )}
    </div>
  );
}
