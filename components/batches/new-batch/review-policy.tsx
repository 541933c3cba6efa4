"use client";

import { useId } from "react";
import type { ReviewPolicy } from "@/lib/api/batches";
import { fieldClass, labelClass } from "../budget";
import { ErrorText } from "../ui";

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

const CHOICES: Array<[ReviewDraft["when"], string]> = [
  ["none", "None"],
  ["failed", "Items that failed (an error or a check)"],
  ["all", "Every item"],
  ["sample", "A sample"],
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
  const ids = { when: useId(), percent: useId() };
  return (
    <div className="flex flex-col gap-1">
      <label htmlFor={ids.when} className={labelClass}>
        Review
      </label>
      <div className="flex flex-wrap items-center gap-2">
        {/* fieldClass is w-full: each control's width is its wrapper's. */}
        <span className="min-w-0 flex-1 basis-48">
          <select
            id={ids.when}
            value={draft.when}
            onChange={(e) => onChange({ ...draft, when: e.target.value as ReviewDraft["when"] })}
            className={fieldClass}
          >
            {CHOICES.map(([value, label]) => (
              <option key={value} value={value}>
                {label}
              </option>
            ))}
          </select>
        </span>
        {draft.when === "sample" ? (
          <span className="flex shrink-0 items-center gap-1 text-xs text-zinc-700">
            <span className="w-20">
              <input
                id={ids.percent}
                type="number"
                aria-label="Review sample percent"
                min={0.1}
                max={100}
                step="any"
                inputMode="decimal"
                value={draft.percent}
                onChange={(e) => onChange({ ...draft, percent: e.target.value })}
                aria-invalid={error ? true : undefined}
                className={fieldClass}
              />
            </span>
            % of the items
          </span>
        ) : null}
      </div>
      <p className="text-xs text-zinc-600">Finished items it picks wait in Review for a person to accept, correct or reject.</p>
      {error ? <ErrorText error={error} /> : null}
    </div>
  );
}
