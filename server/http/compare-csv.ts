import "server-only";
import type postgres from "postgres";
import type { CompareChange } from "@/lib/api/compare";
import { pairPageSql, shownOutput } from "@/server/batches/compare";
import { ITEM_INPUT_MAX_CHARS } from "@/server/batches/repository";
import { cellSql, csvChunk, csvHead, type ExportArgs, exportStream } from "./export";

/**
 * compare.csv: every matched pair of a comparison (or those of one change), one line each with
 * a.* and b.* columns, formula cells guarded as in results.csv. An export like the others (one
 * snapshot, one of the user's export slots, cut at `exports.max_seconds`, fetches read as the
 * client reads), each line written by PostgreSQL, walking a's items and looking b's up by key.
 */

const SIDE = ["status", "verdict", "output", "cost_usd", "duration_ms"] as const;
export const COMPARE_CSV_HEADER = ["item_key", "input", "expected", "change", ...SIDE.map((c) => `a.${c}`), ...SIDE.map((c) => `b.${c}`)];

/**
 * The lines of compare.csv: the pairs of pairPageSql from the start ($2 = 0, no limit: $3 null;
 * b's id is $4), in a's position order (exportStream's lines).
 */
function compareLines(change: CompareChange, previewMaxChars: number): string {
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
  return `select line from (${pairPageSql(`array_to_string(array[${cells.join(", ")}], ',') as line, a.position`, change, "$4")}) pairs order by position`;
}

/**
 * The stored bytes behind each line of compareLines, in its order: a's key, input (as far as the
 * line shows it) and expected, and each side's answer (as far as the line shows it).
 */
function compareSizes(change: CompareChange, previewMaxChars: number): string {
  const answer = (x: "a" | "b") =>
    `least(coalesce(pg_column_size(${x}.output), octet_length(coalesce(${x}.preview, ${x}.result)), 0), ${4 * (Math.ceil(previewMaxChars * 1.5) + 2)})`;
  const size = `octet_length(a.item_key) + least(octet_length(a.input), ${4 * ITEM_INPUT_MAX_CHARS}) + coalesce(pg_column_size(a.expected), 0) + ${answer("a")} + ${answer("b")}`;
  return `select size from (${pairPageSql(`${size} as size, a.position`, change, "$4")}) pairs order by position`;
}

/** compare.csv of batch `batchId` (a) against `otherId` (b): ownership of both checked by the caller. */
export function compareCsvStream(
  sql: postgres.Sql,
  args: ExportArgs & { otherId: string; change?: CompareChange; previewMaxChars: number },
): Promise<ReadableStream<Uint8Array>> {
  const change = args.change ?? "all";
  return exportStream(sql, {
    ...args,
    lines: { sql: compareLines(change, args.previewMaxChars), params: [args.batchId, 0, null, args.otherId] },
    sizes: { sql: compareSizes(change, args.previewMaxChars), params: [args.batchId, 0, null, args.otherId] },
    head: csvHead(COMPARE_CSV_HEADER, false),
    write: csvChunk,
  });
}
