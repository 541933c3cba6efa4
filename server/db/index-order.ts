import { sql } from "drizzle-orm";
import type { DbOrTx } from "./client";

/**
 * For the rest of the transaction, plans walk an index in its order instead of sorting.
 *
 * A batch's pages (items, results export) read rows in position order, and every filter they take
 * has a (batch_id, position) index (the position index, or a status's or the failed verdict's
 * partial index). On a freshly loaded batch that autovacuum has not analyzed yet, the planner
 * estimated 517 of 100,000 rows and chose a bitmap scan and a sort of the whole rest of the batch
 * for every page: 216 ms an export page (results.jsonl 15x psql's COPY) and 310 ms a
 * `?verdict=passed` items page, against 4.5 ms and 13 ms once analyzed (issue 44). Forbidding the
 * sort leaves only the plan that reads just the page, whatever the statistics say.
 */
export const INDEX_ORDER_ONLY = "select set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)";

/** `read` in a transaction of its own that plans in index order (INDEX_ORDER_ONLY). */
export function inIndexOrder<T>(db: DbOrTx, read: (tx: DbOrTx) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    await tx.execute(sql.raw(INDEX_ORDER_ONLY));
    return read(tx);
  });
}
