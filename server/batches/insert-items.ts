import { once } from "node:events";
import { type DbOrTx, driverOf } from "@/server/db/client";
import { orderedIds } from "@/server/db/ordered-ids";
import { AppError } from "@/server/errors";

/** One item row as the writer hands it over: key, prompt, and what the owner sees as its input. */
export interface ItemRow {
  key: string;
  prompt: string;
  input: string;
  /** Object items: the `expected` value the checks compare against (never in the prompt). */
  expected?: unknown;
}

/** Characters per COPY data message: large enough that messages cost nothing, small enough to stream. */
const COPY_CHUNK_CHARS = 256 * 1024;

// COPY's text format: backslash, newline, carriage return and the tab delimiter are escaped.
// PostgreSQL text cannot hold NUL, so it is refused here, naming the item.
const SPECIAL = /[\\\n\r\t\0]/;
const SPECIALS = /[\\\n\r\t]/g;
const ESCAPES: Record<string, string> = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function copyText(value: string, index: number, field: string): string {
  if (!SPECIAL.test(value)) return value;
  if (value.includes("\0"))
    throw new AppError("validation_failed", `items.${index}: ${field} must not contain NUL (\\u0000) characters`);
  return value.replace(SPECIALS, (c) => ESCAPES[c]!);
}

/** jsonb in COPY's text format: the JSON text, escaped like any text; \N (NULL) when the item has none. */
function expectedText(expected: unknown, index: number): string {
  return expected === undefined ? "\\N" : copyText(JSON.stringify(expected), index, "expected");
}

/**
 * Chunks up to this many items and characters go in one multi-row INSERT; larger ones stream with
 * COPY. postgres.js 3.4.9 waits ~85-90 ms on every `COPY ... FROM STDIN` inside a transaction,
 * whatever its size. Measured (PostgreSQL 15, ~210-character prompts): the INSERT took 14-28 ms
 * up to 256 items against COPY's 65-115 ms, 93 vs 123 ms at 1,024 items, 100 vs 134 ms at 2,048,
 * and lost from 4,096 items (~860 KB) on, where COPY's cheaper parsing outweighs its wait.
 */
export const INSERT_MAX_ITEMS = 1_000;
const INSERT_MAX_CHARS = 512 * 1024;

/**
 * The item-write SQL of every submission: `items` become positions offset+1, offset+2, ... of
 * the batch; the first `live` positions of the batch enter as queued, the rest as pending.
 * Written in the caller's transaction, so nothing is visible before it commits and any error
 * rolls every row back. Small chunks take one INSERT (no COPY wait); large ones stream with COPY
 * FROM STDIN: measured on 100,000 items (PostgreSQL 15, bench/scale), COPY parses the rows in a
 * fraction of the time INSERT ... SELECT over one JSON parameter took, and they cross the wire
 * once, in chunks. Both write the same rows.
 *
 * Each row's id comes from here, time-ordered (server/db/ordered-ids.ts): the primary key's index
 * then grows at its right edge instead of taking each row on a random leaf, and with no volatile
 * default left to evaluate, COPY writes the heap a page of rows at a time.
 */
export async function insertItems(
  tx: DbOrTx,
  args: { batchId: string; offset: number; live: number; items: readonly ItemRow[] },
): Promise<void> {
  if (args.items.length === 0) return;
  if (oneInsert(args.items)) await insertItemRows(tx, args);
  else await copyRows(tx, args);
}

/**
 * These items take the one-INSERT path (not COPY), which may go out pipelined behind the batch's
 * own insert on the transaction's connection: COPY is never sent before an earlier statement answered.
 */
export function oneInsert(items: readonly ItemRow[]): boolean {
  return items.length <= INSERT_MAX_ITEMS && textChars(items) <= INSERT_MAX_CHARS;
}

function textChars(items: readonly ItemRow[]): number {
  let n = 0;
  for (const item of items) n += item.key.length + item.prompt.length + item.input.length;
  return n;
}

function plainText(value: string, index: number, field: string): string {
  if (value.includes("\0"))
    throw new AppError("validation_failed", `items.${index}: ${field} must not contain NUL (\\u0000) characters`);
  return value;
}

/**
 * One INSERT over parallel text arrays: the same columns, positions and window as the COPY (for
 * chunks `oneInsert` accepts). The rows are checked before it returns, so a refused row throws
 * here and nothing of the chunk is sent.
 */
export function insertItemRows(
  tx: DbOrTx,
  args: { batchId: string; offset: number; live: number; items: readonly ItemRow[] },
): Promise<unknown> {
  const n = args.items.length;
  const ids = orderedIds(n);
  const keys = new Array<string>(n);
  const prompts = new Array<string>(n);
  const inputs = new Array<string>(n);
  const expected = new Array<string | null>(n);
  for (let i = 0; i < n; i++) {
    const item = args.items[i]!;
    const index = args.offset + i;
    keys[i] = plainText(item.key, index, "item_key");
    prompts[i] = plainText(item.prompt, index, "prompt");
    inputs[i] = plainText(item.input, index, "input");
    expected[i] = item.expected === undefined ? null : plainText(JSON.stringify(item.expected), index, "expected");
  }
  const sql = driverOf(tx);
  return sql`
    insert into subagent_batch_items (id, batch_id, position, item_key, prompt, input, status, expected)
    select r.id, ${args.batchId}::uuid, ${args.offset}::int + r.ord::int, r.item_key, r.prompt, r.input,
           case when ${args.offset}::int + r.ord::int <= ${args.live}::int then 'queued' else 'pending' end,
           r.expected::jsonb
    from unnest(${ids}::uuid[], ${keys}::text[], ${prompts}::text[], ${inputs}::text[], ${expected}::text[])
      with ordinality as r(id, item_key, prompt, input, expected, ord)`;
}

async function copyRows(
  tx: DbOrTx,
  args: { batchId: string; offset: number; live: number; items: readonly ItemRow[] },
): Promise<void> {
  const query = driverOf(tx)`copy subagent_batch_items (id, batch_id, position, item_key, prompt, input, status, expected) from stdin`;
  // postgres.js 3.4.9 never settles the stream of a COPY that fails after end() (porsager/postgres
  // #1173); the error still reaches the query's reject, so it is taken from there.
  const failed = new Promise<never>((_, reject) => {
    (query as unknown as { reject: (err: unknown) => void }).reject = reject;
  });
  failed.catch(() => {});
  const copy = await query.writable();
  const stop = Promise.race([failed, once(copy, "error").then(([err]) => Promise.reject(err))]);
  stop.catch(() => {}); // observed where it matters: below, and while waiting for drain
  try {
    const ids = orderedIds(args.items.length);
    let chunk = "";
    for (let i = 0; i < args.items.length; i++) {
      const item = args.items[i]!;
      const index = args.offset + i;
      const position = index + 1;
      chunk += `${ids[i]}\t${args.batchId}\t${position}\t${copyText(item.key, index, "item_key")}\t${copyText(item.prompt, index, "prompt")}\t${copyText(item.input, index, "input")}\t${position <= args.live ? "queued" : "pending"}\t${expectedText(item.expected, index)}\n`;
      if (chunk.length >= COPY_CHUNK_CHARS) {
        if (!copy.write(chunk)) await Promise.race([once(copy, "drain"), stop]);
        chunk = "";
      }
    }
    copy.end(chunk);
  } catch (err) {
    // Sends CopyFail: the server ends the COPY and the transaction rolls back.
    copy.destroy(err instanceof Error ? err : new Error(String(err)));
    throw err;
  }
  await Promise.race([once(copy, "finish"), stop]);
}
