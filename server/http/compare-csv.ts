import "server-only";
import type postgres from "postgres";
import type { CompareChange } from "@/lib/api/compare";
import { pairPageSql, shownOutput } from "@/server/batches/compare";
import { ITEM_INPUT_MAX_CHARS } from "@/server/batches/repository";
import { cellSql, csvHead, type ExportArgs, exportStream } from "./export";

/**
 * compare.csv: every matched pair of a comparison (or those of one change), one line each with
 * a.* and b.* columns, formula cells guarded as in results.csv. An export like the others (one
 * snapshot, one of the user's export slots, cut at `exports.max_seconds`, pages read as the
 * client reads), each line written by PostgreSQL; a page walks a's items and looks b's up by key.
 */

const SIDE = ["status", "verdict", "output", "cost_usd", "duration_ms"] as const;
export const COMPARE_CSV_HEADER = ["item_key", "input", "expected", "change", ...SIDE.map((c) => `a.${c}`), ...SIDE.map((c) => `b.${c}`)];

/**
 * A page's lines: the pairs of pairPageSql (b's id is $5, after the export's four), each line's
 * bytes summed over the lines before it so the page stops at $4 bytes (exportStream's page).
 */
function comparePage(change: CompareChange, previewMaxChars: number): string {
  const cell = cellSql(false);
  const side = (x: "a" | "b") => [
    `${x}.status`,
    `coalesce(${x}.verdict, '')`,
    cell.json(shownOutput(x, previewMaxChars)),
    `${x}.cost_usd::text`,
    `coalesce(${cell.number(`round(extract(epoch from ${x}.finished_at - ${x}.started_at) * 1000)::bigint::text`)}, '')`,
  ];
  const cells = [
    cell.text("a.item_key"),
    cell.text(`left(a.input, ${ITEM_INPUT_MAX_CHARS})`),
    cell.json("a.expected"),
    "c.change",
    ...side("a"),
    ...side("b"),
  ];
  const pairs = pairPageSql(`array_to_string(array[${cells.join(", ")}], ',') as line, a.position`, change, "$5");
  return `
  select line, position, null::text
    from (select line, position,
                 coalesce(sum(octet_length(line)) over (order by position rows between unbounded preceding and 1 preceding), 0) as before
            from (${pairs}) pairs) page
   where before < $4
   order by position`;
}

/** compare.csv of batch `batchId` (a) against `otherId` (b): ownership of both checked by the caller. */
export function compareCsvStream(
  sql: postgres.Sql,
  args: ExportArgs & { otherId: string; change?: CompareChange; previewMaxChars: number },
): Promise<ReadableStream<Uint8Array>> {
  return exportStream(sql, {
    ...args,
    page: comparePage(args.change ?? "all", args.previewMaxChars),
    params: [args.otherId],
    head: csvHead(COMPARE_CSV_HEADER, false),
    eol: Buffer.from("\r\n"),
  });
}
