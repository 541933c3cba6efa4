import { sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";
import { AppError } from "@/server/errors";

/**
 * The per-user storage quota (quotas.max_storage_bytes): a user's workspace files in all their
 * threads and their uploaded `/v1` files, together. Checked last in every write transaction,
 * under a per-user transaction lock: a second writer's check waits for the first to commit and
 * then counts its rows, so two uploads that fit alone but not together cannot both pass. The
 * lock is held only from this check to the commit.
 */
export async function checkStorageQuota(tx: DbOrTx, args: { userId: string; maxStorageBytes: number }): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`storage:${args.userId}`}, 0))`);
  // A separate statement, so (read committed) its snapshot is taken after the lock is held.
  // Workspace rows through the owner's threads: workspace_files is indexed by thread.
  const [row] = await tx.execute<{ total: number }>(sql`
    select (
      coalesce((select sum(f.size) from workspace_files f
                where f.thread_id in (select t.id from threads t where t.user_id = ${args.userId})
                  and f.user_id = ${args.userId}), 0)
      + coalesce((select sum(c.bytes) from compat_files c where c.user_id = ${args.userId}), 0)
    )::float8 as total`);
  const total = Number(row?.total ?? 0);
  if (total > args.maxStorageBytes)
    throw new AppError(
      "payload_too_large",
      `your files would total ${total} bytes, more than quotas.max_storage_bytes (${args.maxStorageBytes} bytes, ` +
        "workspace files of every thread and /v1 files together); nothing was stored — delete files to make room",
    );
}
