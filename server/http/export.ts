import type postgres from "postgres";
import { createDatabase, type Database, databaseUrlFromEnv } from "@/server/db/client";
import { log } from "@/server/log";
import { exportChunk } from "@/server/instruments";
import { encodeResultLines, type RawExportRow } from "./jsonl";

/**
 * results.jsonl as a byte stream: one READ ONLY, REPEATABLE READ transaction (so a batch that is
 * still running exports one consistent snapshot of every item, terminal or in flight) reading a
 * server-side cursor in position order. Rows are fetched only when the HTTP consumer asks for
 * more, so memory stays at a few fetches of rows however large the batch or slow the client.
 * Ownership must be checked by the caller before streaming (the route answers 404 first).
 */

/** Rows per cursor fetch: with results ≤ max_result_chars (100k by default) that is ≤ ~1 MB per fetch (see bench/RESULTS.md). */
export const EXPORT_FETCH_ROWS = 8;
/** A client that stops reading for this long releases the snapshot and its connection. */
export const EXPORT_STALL_MS = 30_000;
/** Exports at once per web process; more wait for a connection of this pool, never one of the main pool. */
export const EXPORT_POOL_SIZE = 3;

const globalForExport = globalThis as unknown as { __flotillaExportDb?: Database };

/**
 * The exports' own small pool: a download holds its connection for as long as the client reads,
 * so slow readers can at most occupy these EXPORT_POOL_SIZE connections, never the pool every
 * other request of every user needs.
 */
export function exportPool(): postgres.Sql {
  globalForExport.__flotillaExportDb ??= createDatabase(databaseUrlFromEnv(), {
    max: EXPORT_POOL_SIZE,
    applicationName: "flotilla-export",
  });
  return globalForExport.__flotillaExportDb.sql;
}

/**
 * The export projection, column by column (the one place a full result leaves the server).
 * The driver hands every column over as raw UTF-8 bytes and http-jsonl.ts writes the JSON
 * lines from them (read as latin1, one character per byte), so a 100k-character result is
 * never UTF-8 decoded and encoded back.
 */
const EXPORT_QUERY = `
  select item_key, position, status, attempts, result, error, input_tokens, output_tokens, input
    from subagent_batch_items
   where batch_id = $1
   order by position`;

class ExportAborted extends Error {}

/**
 * Yields until the driver has sent its request for the next fetch, so the database produces those
 * rows while this thread encodes the current ones (the export's time fell from 2.1× to 1.7× COPY's
 * on PostgreSQL 18; bench/RESULTS.md). postgres.js writes that request from a setImmediate
 * scheduled once the cursor callback settles, i.e. after one scheduled here: hence two turns.
 */
const driverHasAskedForMore = () => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve)));

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

        // One fetch, encoded and handed over once the consumer has taken the previous chunk.
        const deliver = async (rows: RawExportRow[]): Promise<void> => {
          await driverHasAskedForMore();
          check();
          const chunk = encodeResultLines(rows);
          await demand();
          controller.enqueue(exportChunk(chunk));
        };

        // The callback form of the driver's cursor, not its async iterator: with the iterator,
        // every fetch's socket buffers stay reachable until a full collection (about 64 MB of
        // them on a 100 kB-per-row export), while here young-generation collections free them as
        // they go (bench/RESULTS.md). The driver asks for the next fetch when the callback's
        // promise settles: it returns the previous fetch's delivery (the backpressure) and
        // chains its own rows behind it, so they are encoded while the database sends the next
        // ones. A failed delivery fails the next callback, which ends the query. The driver does
        // not wait for the callback of the final, partial fetch: its delivery is awaited here.
        const run = () =>
          sql.begin("isolation level repeatable read read only", async (tx) => {
            let delivering: Promise<void> = Promise.resolve();
            await tx
              .unsafe(EXPORT_QUERY, [args.batchId])
              .raw()
              .cursor(fetchRows, (rows) => {
                const previous = delivering;
                delivering = previous.then(() => deliver(rows));
                // Observed by the next callback or below, maybe a socket read later: not unhandled.
                delivering.catch(() => {});
                return previous;
              });
            await delivering;
          });

        run().then(
          () => {
            if (!bodyCancelled) controller.close();
          },
          (err) => {
            // A fetch may still wait for demand that will never come: let it go.
            stop ??= "the export failed";
            nudge();
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
    // Counted in chunks: one fetch queued for the socket while the next is read and encoded.
    { highWaterMark: 1 },
  );
}
