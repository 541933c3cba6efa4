import { sql } from "drizzle-orm";
import type { DbOrTx } from "@/server/db/client";

/** One item row as the writer hands it over: key, prompt, and what the owner sees as its input. */
export interface ItemRow {
  key: string;
  prompt: string;
  input: string;
}

/**
 * The item-write SQL of every submission (every door reaches it through server/batches/submit.ts):
 * `items` become positions offset+1, offset+2, ... of the batch; the first `live` positions of
 * the batch enter as queued, the rest as pending. One statement over a JSON array, so a chunk of
 * thousands of rows is one round trip.
 */
export async function insertItems(
  tx: DbOrTx,
  args: { batchId: string; offset: number; live: number; items: readonly ItemRow[] },
): Promise<void> {
  if (args.items.length === 0) return;
  const json = JSON.stringify(args.items.map((i) => [i.key, i.prompt, i.input]));
  await tx.execute(sql`
    insert into subagent_batch_items (batch_id, position, item_key, prompt, input, status)
    select ${args.batchId}::uuid, (${args.offset}::int + t.ord)::int, t.v->>0, t.v->>1, t.v->>2,
           case when ${args.offset}::int + t.ord <= ${args.live}::int then 'queued' else 'pending' end
      from json_array_elements(${json}::json) with ordinality as t(v, ord)
  `);
}
