"use client";

import { useId } from "react";
import type { ReviewPolicy } from "@/lib/api/batches";
import { ErrorText } from "../ui";
import { fieldClass, labelClass, NumberInput, Options } from "@/components/ui/field";

/** The Review field as typed: which finished items join the review queue, and a sample's share in percent. */
export interface ReviewDraft {
  when: "none" | ReviewPolicy["when"];
  percent: string;
}

export const NO_REVIEW: ReviewDraft = { when: "none", percent: "10" };

export function reviewDraftOf(policy: ReviewPolicy | null | undefined): ReviewDraft {
  if (!policy) return NO_REVIEW;
  return { when: policy.when, percent: policy.rate === undefined ? NO_REVIEW.percent : String(Math.round(policy.rate * 1000) / 10) };
}

/** The policy the draft asks for (null: none), or what is wrong with the sample's share. */
export function reviewPolicyOf(draft: ReviewDraft): { value: ReviewPolicy | null } | { error: string } {
  if (draft.when === "none") return { value: null };
  if (draft.when !== "sample") return { value: { when: draft.when } };
  const percent = Number(draft.percent);
  if (draft.percent.trim() === "" || !Number.isFinite(percent) || percent <= 0 || percent > 100)
    return { error: "Review sample: a share between 0 and 100 %." };
  return { value: { when: "sample", rate: percent / 100 } };
}

const CHOICES: Array<{ value: ReviewDraft["when"]; label: string }> = [
  { value: "none", label: "None" },
  { value: "failed", label: "Items that failed (an error or a check)" },
  { value: "all", label: "Every item" },
  { value: "sample", label: "A sample" },
];

/** "Review": which items wait in /review for a person once they finish. */
export function ReviewPolicyField({
  draft,
  onChange,
  error,
}: {
  draft: ReviewDraft;
  onChange: (next: ReviewDraft) => void;
  error?: string | null;
}) {
  const whenId = useId();
  return (
    <div className="flex flex-col gap-1">
      <label htmlFor={whenId} className={labelClass}>
        Review
      </label>
      <div className="flex flex-wrap items-center gap-2">
        {/* fieldClass is w-full: each control's width is its wrapper's. */}
        <span className="min-w-0 flex-1 basis-48">
          <select
            id={whenId}
            value={draft.when}
            onChange={(e) => onChange({ ...draft, when: e.target.value as ReviewDraft["when"] })}
            className={fieldClass}
          >
            <Options options={CHOICES} />
          </select>
        </span>
        {draft.when === "sample" ? (
          <span className="flex shrink-0 items-center gap-1 text-xs text-zinc-700">
            <NumberInput
              aria-label="Review sample percent"
              min={0.1}
              max={100}
              step="any"
              value={draft.percent}
              onChange={(percent) => onChange({ ...draft, percent })}
              invalid={!!error}
            />
            % of the items
          </span>
        ) : null}
      </div>
      <p className="text-xs text-zinc-600">Finished items it picks wait in Review for a person to accept, correct or reject.</p>
      {error ? <ErrorText error={error} /> : null}
    </div>
  );
}
