import type postgres from "postgres";
import { log } from "@/server/log";
import { exportChunk } from "@/server/metrics";
import { encodeResultLines, type RawExportRow } from "./http-jsonl";

/**
 * results.jsonl as a byte stream: one READ ONLY, REPEATABLE READ transaction (so a batch that is
 * still running exports one consistent snapshot of every item, terminal or in flight) reading a
 * server-side cursor in position order. Rows are fetched only when the HTTP consumer asks for
 * more, so memory stays at a few fetches of rows however large the batch or slow the client.
 * Ownership must be checked by the caller before streaming (the route answers 404 first).
 */

/** Rows per cursor fetch: with results ≤ max_result_chars (100k by default) that is ≤ ~1 MB in flight (8 measured best: see bench/RESULTS.md). */
export const EXPORT_FETCH_ROWS = 8;
/** A client that stops reading for this long releases the snapshot and its connection. */
export const EXPORT_STALL_MS = 5 * 60_000;

/**
 * The export projection, column by column (the one place a full result leaves the server).
 * The driver hands every column over as raw UTF-8 bytes and http-jsonl.ts writes the JSON
 * lines from them, so a 100k-character result is never decoded into a JS string and encoded
 * back: about one copy per byte from the database socket to the HTTP socket.
 */
const EXPORT_QUERY = `
  select item_key, position, status, attempts, result, error, input_tokens, output_tokens
    from subagent_batch_items
   where batch_id = $1
   order by position`;

class ExportAborted extends Error {}

export function exportResultsStream(
  sql: postgres.Sql,
  args: { batchId: string; fetchRows?: number; stallMs?: number; signal?: AbortSignal },
): ReadableStream<Uint8Array> {
  const fetchRows = args.fetchRows ?? EXPORT_FETCH_ROWS;
  const stallMs = args.stallMs ?? EXPORT_STALL_MS;
  /** Why the export must stop early (client cancelled the body or disconnected); undefined while it may go on. */
  let stop: string | undefined;
  /** The body was cancelled: the controller may no longer be used. */
  let bodyCancelled = false;
  let wake: (() => void) | undefined;
  const nudge = () => {
    wake?.();
    wake = undefined;
  };
  // The request's signal: a client that disconnects ends the export even if nobody cancels the body.
  args.signal?.addEventListener(
    "abort",
    () => {
      stop ??= "the client disconnected";
      nudge();
    },
    { once: true },
  );

  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        const check = () => {
          if (stop) throw new ExportAborted(stop);
        };
        // Waits until the consumer has drained the queue (or went away, or stalled too long).
        const demand = async (): Promise<void> => {
          while (!stop && (controller.desiredSize ?? 0) <= 0) {
            let timer: NodeJS.Timeout | undefined;
            const stalled = await new Promise<boolean>((resolve) => {
              wake = () => resolve(false);
              timer = setTimeout(() => resolve(true), stallMs);
            });
            clearTimeout(timer);
            if (stalled) stop ??= `the client stopped reading for ${stallMs} ms`;
          }
          check();
        };

        const run = async () => {
          await sql.begin("isolation level repeatable read read only", async (tx) => {
            const cursor = tx.unsafe(EXPORT_QUERY, [args.batchId]).raw().cursor(fetchRows);
            const fetches = cursor[Symbol.asyncIterator]() as AsyncIterator<RawExportRow[]>;
            // One fetch ahead: the database sends the next rows while these are encoded and
            // written (one fetch of rows more in memory, for a pipeline instead of turns).
            let inFlight: Promise<IteratorResult<RawExportRow[]>> | undefined = fetches.next();
            // Rows were handed over and the cursor waits for us to continue or close it.
            let holding = false;
            try {
              for (;;) {
                const fetched: IteratorResult<RawExportRow[]> = await inFlight;
                inFlight = undefined;
                if (fetched.done) break;
                holding = true;
                check();
                inFlight = fetches.next();
                holding = false;
                controller.enqueue(exportChunk(encodeResultLines(fetched.value)));
                await demand();
              }
            } finally {
              // Stopping early: the cursor must be closed (after any fetch in flight lands) before
              // the transaction can roll back; a suspended cursor would hold the connection forever.
              if (inFlight) {
                const landed = await inFlight.catch(() => ({ done: true as const, value: undefined }));
                if (!landed.done) await fetches.return?.();
              } else if (holding) {
                await fetches.return?.();
              }
            }
          });
        };

        run().then(
          () => {
            if (!bodyCancelled) controller.close();
          },
          (err) => {
            if (err instanceof ExportAborted) log.info({ batchId: args.batchId, reason: err.message }, "export stopped");
            else log.error({ err, batchId: args.batchId }, "export failed");
            if (!bodyCancelled) controller.error(err);
          },
        );
      },
      pull() {
        nudge();
      },
      cancel() {
        bodyCancelled = true;
        stop ??= "the client cancelled the download";
        nudge();
      },
    },
    // Counted in chunks: one fetch queued ahead of the socket, the next being read.
    { highWaterMark: 1 },
  );
}
