import { and, eq, inArray } from "drizzle-orm";
import { threadBatches } from "@/server/batches/owned";
import { cancelBatch } from "@/server/batches/repository";
import type { Db } from "@/server/db/client";
import { subagentBatches, threads } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { abortLiveRun } from "@/server/runtime/run-registry";
import { activeStreamOf, notifyChatStream } from "./streams";
import { getThreadForUser } from "./threads";

export interface DeletedThread {
  id: string;
  /** Batches that were still active and got cancelled before the thread's data went. */
  cancelledBatches: number;
}

/**
 * Deletes the caller's thread and everything in it. Work still running stops first: the lead
 * response (here, or in another web process by notification) and every active batch
 * (cancelled, so workers abort their in-flight items); then the thread row goes, and its
 * messages, runs, streams, batches, items and results with it (foreign keys cascade).
 */
export async function deleteThread(db: Db, input: { userId: string; threadId: string }): Promise<DeletedThread> {
  const thread = await getThreadForUser(db, input);
  const stream = await activeStreamOf(db, { threadId: thread.id });
  if (stream?.runId && !abortLiveRun(stream.runId)) await notifyChatStream(db, `stop:${stream.runId}`);

  const active = await db
    .select({ id: subagentBatches.id })
    .from(subagentBatches)
    .where(
      and(
        threadBatches({ userId: input.userId, threadId: thread.id }),
        inArray(subagentBatches.status, ["queued", "running", "paused"]),
      ),
    );
  let cancelledBatches = 0;
  for (const b of active) {
    try {
      await cancelBatch(db, { userId: input.userId, threadId: thread.id, batchId: b.id });
      cancelledBatches++;
    } catch (err) {
      // Finished meanwhile: nothing left to stop.
      if (!(err instanceof AppError && err.code === "conflict")) throw err;
    }
  }
  const deleted = await db
    .delete(threads)
    .where(and(eq(threads.id, thread.id), eq(threads.userId, input.userId)))
    .returning({ id: threads.id });
  if (deleted.length === 0) throw new AppError("not_found", "thread not found");
  return { id: thread.id, cancelledBatches };
}
