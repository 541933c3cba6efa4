import { reviewPageSchema } from "@/lib/api/review-queue";
import { requireUser } from "@/server/auth/authenticate";
import { listReviews } from "@/server/batches/reviews";
import { getConfig } from "@/server/config/load";
import { getDatabase } from "@/server/db/client";
import { parseReviewQuery, project } from "@/server/http/batch-scope";
import { handle, json } from "@/server/http/route";

export const dynamic = "force-dynamic";

/** The caller's review queue across batches (`state` pending by default, `batch_id`, `cursor`, `limit` ≤ 100), oldest first. */
export const GET = handle(async (req: Request) => {
  const { userId } = await requireUser(req);
  const query = parseReviewQuery(new URL(req.url).searchParams);
  const previewMaxChars = getConfig().subagent_batches.result_preview_max_chars;
  const page = await listReviews(getDatabase().db, { userId, state: query.state ?? "pending", batchId: query.batch_id, cursor: query.cursor, limit: query.limit ?? 20, previewMaxChars });
  return json(project(reviewPageSchema, page));
});
