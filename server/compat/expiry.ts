import { and, eq, inArray, isNull, sql } from "drizzle-orm";
import { BATCH_CONTROLS } from "@/lib/api/batch-controls";
import { cancelBatch } from "@/server/batches/repository";
import type { DbOrTx } from "@/server/db/client";
import { compatBatches, subagentBatches } from "@/server/db/schema";
import type { CompatApi } from "@/server/db/schema/compat";
import { AppError } from "@/server/errors";

/**
 * The completion window of compatible batches, as one explicit step: a batch past its window
 * with work left is cancelled with reason expired (its unfinished items become `expired`). The
 * HTTP readers call it before they read (server/http/compat.ts, the list routes, result files)
 * and the worker before it starts another of the batch's requests (server/compat/execute.ts);
 * the reads themselves never write. Owner-scoped; `id` narrows it to one batch.
 */
export async function expireCompatBatches(db: DbOrTx, scope: { userId: string; api: CompatApi; id?: string }): Promise<void> {
  const c = compatBatches;
  const due = await db
    .select({ id: c.id, batchId: subagentBatches.id, threadId: subagentBatches.threadId })
    .from(c)
    .innerJoin(subagentBatches, eq(subagentBatches.id, c.batchId))
    .where(
      and(
        eq(c.userId, scope.userId),
        eq(c.api, scope.api),
        scope.id === undefined ? undefined : eq(c.id, scope.id),
        isNull(c.expiredAt),
        sql`${c.expiresAt} <= now()`,
        // What a cancel moves from: a batch with work left.
        inArray(subagentBatches.status, [...BATCH_CONTROLS.cancel.from]),
      ),
    );
  for (const batch of due) await expireOne(db, scope.userId, batch);
}

async function expireOne(db: DbOrTx, userId: string, due: { id: string; batchId: string; threadId: string }): Promise<void> {
  await db.transaction(async (tx) => {
    const [marked] = await tx
      .update(compatBatches)
      .set({ expiredAt: sql`now()` })
      .where(and(eq(compatBatches.id, due.id), isNull(compatBatches.expiredAt)))
      .returning({ id: compatBatches.id });
    // Another caller expired it first (this update waited for its commit): nothing left to do.
    if (!marked) return;
    try {
      await cancelBatch(tx, { userId, threadId: due.threadId, batchId: due.batchId });
    } catch (err) {
      // Finished in the meantime: nothing was left to expire.
      if (err instanceof AppError && err.code === "conflict") {
        await tx.update(compatBatches).set({ expiredAt: null }).where(eq(compatBatches.id, due.id));
        return;
      }
      throw err;
    }
  });
}
