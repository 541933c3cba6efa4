"use client";

import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { reviewPageSchema } from "@/lib/api/review-queue";
import { fetchJson } from "@/lib/api/client";
import { type ReviewedBatch, SaveGoldenSetDialog } from "@/components/golden-sets/save-dialog";
import { ErrorText } from "@/components/batches/ui";
import { Button } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";

/** The batches of the person's latest decisions (accepted and rejected), newest first by when they were queued. */
async function decidedBatches(signal: AbortSignal): Promise<ReviewedBatch[]> {
  const pages = await Promise.all(
    (["accepted", "rejected"] as const).map((state) =>
      fetchJson(reviewPageSchema, `/api/reviews?state=${state}&limit=100`, "reviewed items", { signal }),
    ),
  );
  return pages
    .flatMap((p) => p.items)
    .sort((x, y) => y.requested_at.localeCompare(x.requested_at))
    .map((e) => ({ id: e.batch_id, title: e.batch_title }));
}

const distinct = (batches: ReviewedBatch[]) => batches.filter((b, i) => batches.findIndex((o) => o.id === b.id) === i);

/**
 * "Save reviewed as golden set…" on /review: the batches decided on this page first (the latest
 * first), then the one of the item on screen, then those of the person's latest decisions (read
 * when the dialog opens).
 */
export function SaveReviewedButton({ current, seen }: { current: ReviewedBatch | null; seen: readonly ReviewedBatch[] }) {
  const [open, setOpen] = useState(false);
  const decided = useQuery({ queryKey: ["reviews", "decided-batches"], queryFn: ({ signal }) => decidedBatches(signal), enabled: open, staleTime: 0 });
  const batches = distinct([...seen, ...(current ? [current] : []), ...(decided.data ?? [])]);
  return (
    <>
      <Button variant="secondary" size="sm" onClick={() => {
          if (open) void decided.refetch();
          setOpen(true);
        }} disabled={open && decided.isPending}>
        {open && decided.isPending ? <Spinner /> : null}
        Save reviewed as golden set…
      </Button>
      {open && decided.isError ? <ErrorText error={decided.error} /> : null}
      {open && decided.isSuccess && batches.length === 0 ? (
        <p role="status" className="text-xs text-zinc-600">
          Nothing has been reviewed yet: accept or correct some answers first.
        </p>
      ) : null}
      {open && decided.isSuccess && batches.length > 0 ? (
        <SaveGoldenSetDialog batches={batches} initialBatchId={batches[0]!.id} onClose={() => setOpen(false)} />
      ) : null}
    </>
  );
}
