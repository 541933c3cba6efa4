import { resultLineSchema } from "@/lib/api/batches";
import type postgres from "postgres";
import type { ItemStatus } from "@/server/db/schema/batches";
import { log } from "@/server/log";
import { exportChunk } from "@/server/metrics";
import type { ResultLine } from "./types";

/**
 * results.jsonl as a byte stream: one READ ONLY, REPEATABLE READ transaction (so a batch that is
 * still running exports one consistent snapshot of every item, terminal or in flight) reading a
 * server-side cursor in position order. Rows are fetched only when the HTTP consumer asks for
 * more, so memory stays at a few fetches of rows however large the batch or slow the client.
 * Ownership must be checked by the caller before streaming (the route answers 404 first).
 */

/** Rows per cursor fetch: with results ≤ max_result_chars (100k by default) that is ≤ ~3 MB in flight. */
export const EXPORT_FETCH_ROWS = 32;
/** Lines are grouped into chunks of about this many characters (fewer, larger socket writes). */
export const EXPORT_CHUNK_CHARS = 64 * 1024;
/** A client that stops reading for this long releases the snapshot and its connection. */
export const EXPORT_STALL_MS = 5 * 60_000;

interface ExportRow {
  item_key: string;
  position: number;
  status: ItemStatus;
  attempts: number;
  result: string | null;
  error: string | null;
  input_tokens: string | number;
  output_tokens: string | number;
}

/** The explicit export projection (the one place a full result leaves the server). */
export function toResultLine(r: ExportRow): ResultLine {
  return {
    item_key: r.item_key,
    position: r.position,
    status: r.status,
    attempts: r.attempts,
    result: r.result,
    error: r.error,
    usage: { input_tokens: Number(r.input_tokens), output_tokens: Number(r.output_tokens) },
  };
}

class ExportAborted extends Error {}

export function exportResultsStream(
  sql: postgres.Sql,
  args: { batchId: string; fetchRows?: number; stallMs?: number },
): ReadableStream<Uint8Array> {
  const fetchRows = args.fetchRows ?? EXPORT_FETCH_ROWS;
  const stallMs = args.stallMs ?? EXPORT_STALL_MS;
  const encoder = new TextEncoder();
  let cancelled = false;
  let wake: (() => void) | undefined;
  const signal = () => {
    wake?.();
    wake = undefined;
  };

  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        // Waits until the consumer has drained the queue (or went away, or stalled too long).
        const demand = async (): Promise<void> => {
          while (!cancelled && (controller.desiredSize ?? 0) <= 0) {
            let timer: NodeJS.Timeout | undefined;
            const stalled = await new Promise<boolean>((resolve) => {
              wake = () => resolve(false);
              timer = setTimeout(() => resolve(true), stallMs);
            });
            clearTimeout(timer);
            if (stalled) throw new ExportAborted(`export client stopped reading for ${stallMs} ms`);
          }
          if (cancelled) throw new ExportAborted("export cancelled by the client");
        };

        const run = async () => {
          await sql.begin("isolation level repeatable read read only", async (tx) => {
            const cursor = tx<ExportRow[]>`
              select item_key, position, status, attempts, result, error, input_tokens, output_tokens
                from subagent_batch_items
               where batch_id = ${args.batchId}
               order by position
            `.cursor(fetchRows);
            let chunk = "";
            for await (const rows of cursor) {
              for (const row of rows) {
                chunk += `${JSON.stringify(resultLineSchema.parse(toResultLine(row)))}\n`;
                if (chunk.length >= EXPORT_CHUNK_CHARS) {
                  controller.enqueue(exportChunk(encoder.encode(chunk)));
                  chunk = "";
                  await demand();
                }
              }
            }
            if (chunk) controller.enqueue(exportChunk(encoder.encode(chunk)));
          });
        };

        run().then(
          () => {
            if (!cancelled) controller.close();
          },
          (err) => {
            if (err instanceof ExportAborted) log.info({ batchId: args.batchId, reason: err.message }, "export stopped");
            else log.error({ err, batchId: args.batchId }, "export failed");
            if (!cancelled) controller.error(err);
          },
        );
      },
      pull() {
        signal();
      },
      cancel() {
        cancelled = true;
        signal();
      },
    },
    // Counted in chunks: one chunk queued ahead of the socket, the next being built.
    { highWaterMark: 1 },
  );
}
