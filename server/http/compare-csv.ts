import "server-only";
import type { ComparePair } from "@/lib/api/compare";
import { type CompareArgs, comparePairs } from "@/server/batches/compare";
import type { Db } from "@/server/db/client";
import { pagedStream } from "./download";
import { quoted } from "./export";

/**
 * compare.csv: every matched pair of a comparison (or those of one change), one line each with
 * a.* and b.* columns, formula cells guarded as in results.csv. Pulled a page at a time, so a
 * slow reader holds one page, not the batch.
 */

const SIDE = ["status", "verdict", "output", "cost_usd", "duration_ms"] as const;
export const COMPARE_CSV_HEADER = ["item_key", "input", "expected", "change", ...SIDE.map((c) => `a.${c}`), ...SIDE.map((c) => `b.${c}`)];
const PAGE = 200;

const text = (value: unknown) => quoted(typeof value === "string" ? value : value === null || value === undefined ? "" : JSON.stringify(value), false);

function line(p: ComparePair): string {
  const side = (s: ComparePair["a"]) => [s.status, s.verdict ?? "", text(s.output), String(s.cost_usd), s.duration_ms === null ? "" : String(s.duration_ms)];
  return `${[text(p.item_key), text(p.input), p.expected === undefined ? "" : text(p.expected), p.change, ...side(p.a), ...side(p.b)].join(",")}\r\n`;
}

export function compareCsvStream(db: Db, args: CompareArgs & Parameters<typeof comparePairs>[1]): ReadableStream<Uint8Array> {
  const head = `${COMPARE_CSV_HEADER.map((h) => quoted(h, false)).join(",")}\r\n`;
  return pagedStream<string | undefined>(head, undefined, async (cursor) => {
    const page = await comparePairs(db, { ...args, cursor, limit: PAGE });
    return { text: page.items.map(line).join(""), cursor: page.next_cursor };
  });
}
