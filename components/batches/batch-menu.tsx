"use client";

import { useMutation } from "@tanstack/react-query";
import Link from "next/link";
import { useId, useState } from "react";
import type { BatchProjection } from "@/lib/api/batches";
import { formatCount, formatTime } from "@/lib/format";
import { buttonClasses } from "@/components/ui/button";
import { Spinner } from "@/components/ui/spinner";
import { SaveGoldenSetDialog } from "@/components/golden-sets/save-dialog";
import { comparePagePath, fetchVariantDraft } from "./api";
import { NewBatchDialog } from "./new-batch/dialog";
import type { VariantOf } from "./new-batch/variant";
import { useBatchPanelRequests, useLiveBatches } from "./panel-state";
import { NO_WORKER_TITLE } from "./shared";
import { ErrorText, StatusBadge, shortId } from "./ui";

/** How another batch of the thread relates to this one. */
function relation(batch: BatchProjection, other: BatchProjection): string | null {
  if (other.variant_of === batch.id) return "a variant of this batch";
  if (batch.variant_of === other.id) return "this batch's original";
  if (batch.variant_of !== null && other.variant_of === batch.variant_of) return "another variant of the same original";
  return null;
}

/** Which is A: the original before its variant, else the older batch (improved then reads "got better since"). */
export function compareOrder(batch: BatchProjection, other: BatchProjection): { a: string; b: string } {
  if (other.variant_of === batch.id) return { a: batch.id, b: other.id };
  if (batch.variant_of === other.id) return { a: other.id, b: batch.id };
  const otherFirst = other.created_at.localeCompare(batch.created_at) < 0;
  return otherFirst ? { a: other.id, b: batch.id } : { a: batch.id, b: other.id };
}

/** The other batches of the thread to compare with: related ones (by variant_of) first, then newest first. */
export function compareCandidates(batch: BatchProjection, batches: readonly BatchProjection[]) {
  return batches
    .filter((b) => b.id !== batch.id)
    .map((b) => ({ batch: b, relation: relation(batch, b) }))
    .sort(
      (x, y) =>
        Number(y.relation !== null) - Number(x.relation !== null) ||
        y.batch.created_at.localeCompare(x.batch.created_at) ||
        y.batch.id.localeCompare(x.batch.id),
    );
}

/**
 * A batch's menu of what to do with it as a whole: "Run a variant…" (the New batch dialog,
 * prefilled from GET .../variant, over the same items) and "Compare with…" (the thread's other
 * batches, each a link to the comparison page) and "Save reviewed as golden set…" (its accepted
 * and corrected items as a golden set, or a new version of one).
 */
export function BatchMenu({ threadId, batch, workerAlive }: { threadId: string; batch: BatchProjection; workerAlive: boolean }) {
  const listId = useId();
  const batches = useLiveBatches(threadId);
  const { focusBatch } = useBatchPanelRequests(threadId);
  const [variantOf, setVariantOf] = useState<VariantOf | null>(null);
  const [comparing, setComparing] = useState(false);
  const [saving, setSaving] = useState(false);
  const draft = useMutation({
    mutationFn: () => fetchVariantDraft(threadId, batch.id),
    onSuccess: (d) => setVariantOf({ batch, draft: d }),
  });
  const candidates = compareCandidates(batch, batches);
  const noOther = candidates.length === 0;
  const decided = batch.reviews.accepted + batch.reviews.rejected;

  return (
    <div data-testid="batch-menu" className="flex min-w-0 flex-col gap-2">
      <fieldset aria-label="Batch menu" className="flex min-w-0 flex-wrap items-center gap-1.5">
        <span title={workerAlive ? undefined : NO_WORKER_TITLE}>
          <button
            type="button"
            disabled={!workerAlive || draft.isPending}
            aria-busy={draft.isPending || undefined}
            onClick={() => draft.mutate()}
            className={buttonClasses("secondary", "sm")}
          >
            {draft.isPending ? <Spinner /> : null}
            Run a variant…
          </button>
        </span>
        <span title={noOther ? "No other batch on this thread to compare with" : undefined}>
          <button
            type="button"
            aria-expanded={comparing}
            aria-controls={listId}
            disabled={noOther}
            onClick={() => setComparing((c) => !c)}
            className={buttonClasses("secondary", "sm")}
          >
            Compare with…
          </button>
        </span>
        <span title={decided === 0 ? "No item of this batch has been reviewed yet" : undefined}>
          <button type="button" disabled={decided === 0} onClick={() => setSaving(true)} className={buttonClasses("secondary", "sm")}>
            Save reviewed as golden set…
          </button>
        </span>
      </fieldset>
      {draft.isError ? <ErrorText error={draft.error} /> : null}

      <div id={listId} hidden={!comparing || noOther}>
        <p className="mb-1 text-xs text-zinc-600">Compare this batch item by item with:</p>
        <ul aria-label="Compare with" className="flex max-h-56 flex-col overflow-y-auto rounded-md ring-1 ring-zinc-200">
          {candidates.map(({ batch: other, relation: rel }) => {
            const { a, b } = compareOrder(batch, other);
            return (
              <li key={other.id} className="border-t border-zinc-100 first:border-t-0">
                <Link
                  href={comparePagePath(threadId, a, b)}
                  data-testid="compare-candidate"
                  data-batch-id={other.id}
                  className="flex min-w-0 flex-wrap items-center gap-x-2 gap-y-0.5 px-2 py-1.5 text-xs hover:bg-zinc-50 focus-visible:outline-2 focus-visible:-outline-offset-2 focus-visible:outline-sky-600"
                >
                  <span className="font-mono font-medium text-sky-800">{shortId(other.id)}</span>
                  <StatusBadge status={other.status} counts={other.counts} />
                  <span className="text-zinc-600 tabular-nums">
                    {formatCount(other.total)} items · {other.model}
                  </span>
                  {rel ? <span className="font-medium text-zinc-800">{rel}</span> : null}
                  <span className="ml-auto text-zinc-500 tabular-nums">created {formatTime(other.created_at)}</span>
                </Link>
              </li>
            );
          })}
        </ul>
      </div>

      {saving ? (
        <SaveGoldenSetDialog batches={[{ id: batch.id, title: batch.title }]} initialBatchId={batch.id} onClose={() => setSaving(false)} />
      ) : null}
      {variantOf ? (
        <NewBatchDialog
          threadId={threadId}
          variantOf={variantOf}
          onClose={() => setVariantOf(null)}
          onCreated={(created) => {
            setVariantOf(null);
            focusBatch(created.id);
          }}
        />
      ) : null}
    </div>
  );
}
