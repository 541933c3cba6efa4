import { asc, inArray } from "drizzle-orm";
import type { ProviderBatchView } from "@/lib/api/batches";
import type { DbOrTx } from "@/server/db/client";
import { providerBatches } from "@/server/db/schema";

/** The provider batches of these batches for their projections, oldest first (one query). */
export async function loadProviderBatchViews(db: DbOrTx, batchIds: string[]): Promise<Map<string, ProviderBatchView[]>> {
  const byBatch = new Map<string, ProviderBatchView[]>();
  if (batchIds.length === 0) return byBatch;
  const p = providerBatches;
  const rows = await db
    .select()
    .from(p)
    .where(inArray(p.batchId, batchIds))
    .orderBy(asc(p.createdAt), asc(p.id));
  for (const r of rows) {
    const view: ProviderBatchView = {
      id: r.id,
      provider: r.provider === "openai" ? "openai" : "anthropic",
      state: r.state,
      provider_status: r.providerStatus,
      counts: { requests: r.requests, succeeded: r.succeeded, errored: r.errored, expired: r.expired, cancelled: r.cancelled },
      created_at: r.createdAt.toISOString(),
      ended_at: r.endedAt ? r.endedAt.toISOString() : null,
    };
    byBatch.set(r.batchId, [...(byBatch.get(r.batchId) ?? []), view]);
  }
  return byBatch;
}
