import { sql } from "drizzle-orm";
import type { ItemReview, ReviewState } from "@/lib/api/reviews";
import { subagentBatchItems } from "@/server/db/schema";

/** The review columns every read of an item selects, and their projection (reviews.ts, repository.ts). */

export const reviewColumns = () => ({
  reviewState: subagentBatchItems.reviewState,
  reviewNote: subagentBatchItems.reviewNote,
  corrected: sql<boolean>`${subagentBatchItems.reviewedOutput} is not null`,
  reviewedAt: subagentBatchItems.reviewedAt,
  reviewVersion: subagentBatchItems.reviewVersion,
});

type ReviewColumns = { reviewState: ReviewState | null; reviewNote: string | null; corrected: boolean; reviewedAt: Date | null; reviewVersion: number };

/** An item row's review as the API shows it (null: never queued nor decided). */
export function toReview(r: ReviewColumns): ItemReview | null {
  if (r.reviewState === null) return null;
  return {
    state: r.reviewState,
    ...(r.reviewNote === null ? {} : { note: r.reviewNote }),
    corrected: r.corrected,
    ...(r.reviewedAt === null ? {} : { reviewed_at: r.reviewedAt.toISOString() }),
    version: r.reviewVersion,
  };
}

