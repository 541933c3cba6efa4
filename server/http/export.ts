import "server-only";
import type postgres from "postgres";
import { createDatabase, type Database, databaseUrlFromEnv } from "@/server/db/client";
import { log } from "@/server/log";
import { exportChunk, trackExport } from "@/server/instruments";

/**
 * results.jsonl as a byte stream: one READ ONLY, REPEATABLE READ transaction (so a batch that is
 * still running exports one consistent snapshot of every item, terminal or in flight) reading
 * keyset pages in position order, each cut at EXPORT_FETCH_BYTES of stored text. PostgreSQL
 * writes every JSON line itself, so rows reach this process as finished bytes. Pages are read
 * only when the HTTP consumer asks for more (one ahead), so memory stays at a few pages however
 * large the batch or slow the client. Ownership must be checked by the caller before streaming
 * (the route answers 404 first).
 */

/** Stored text per page (at least one row): with results <= max_result_chars that is about 1 MB in flight. */
export const EXPORT_FETCH_BYTES = 1024 * 1024;
/** Rows per page at most; each page asks for as many rows as the last one's sizes say fit. */
export const EXPORT_FETCH_ROWS = 5_000;
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
    fetchTypes: false,
  });
  return globalForExport.__flotillaExportDb.sql;
}

/**
 * One page of the export, each row's JSON line written by PostgreSQL (the one place a full
 * result leaves the server). to_json escapes text exactly as JSON.stringify does (quote,
 * backslash, \b \f \n \r \t, other control characters as lowercase \u00xx, nothing else), and
 * the keys come in the wire schema's order, so each line is byte for byte what JSON.stringify
 * writes (test/api/export-exactness.test.ts). A page takes rows after position $2 while the text
 * stored in the rows before each one stays under $4 bytes, at most $3 rows; octet_length reads
 * stored sizes without decompressing anything. Measured on 100,000 small rows (bench/scale):
 * encoding lines in this process cost 5x a COPY of the same rows; PostgreSQL writes them at
 * nearly COPY's speed.
 */
/** Results longer than this (stored bytes) are escaped by this process, not by PostgreSQL. */
export const LARGE_RESULT_BYTES = 16 * 1024;

const EXPORT_PAGE = `
  select '{"item_key":' || to_json(item_key)::text || ',"input":' || to_json(input)::text
      || ',"position":' || position || ',"status":' || to_json(status)::text || ',"attempts":' || attempts
      || ',"result":' || case when octet_length(result) > ${LARGE_RESULT_BYTES} then '' else coalesce(to_json(result)::text, 'null') end
      || ',"error":' || coalesce(to_json(error)::text, 'null')
      || ',"usage":{"input_tokens":' || input_tokens || ',"output_tokens":' || output_tokens || '}}',
         position,
         case when octet_length(result) > ${LARGE_RESULT_BYTES} then result end
    from (select item_key, input, position, status, attempts, result, error, input_tokens, output_tokens,
                 coalesce(sum(octet_length(item_key) + octet_length(input) + coalesce(octet_length(result), 0)
                              + coalesce(octet_length(error), 0))
                            over (order by position rows between unbounded preceding and 1 preceding), 0) as before
            from subagent_batch_items
           where batch_id = $1 and position > $2
           order by position
           limit $3) page
   where before < $4
   order by position`;

/**
 * A page's rows: [JSON line, position, large result], as the bytes PostgreSQL sent. A result
 * over LARGE_RESULT_BYTES comes raw, its place in the line left empty after `"result":`:
 * to_json escapes at ~78 MB/s where V8's JSON.stringify is several times faster (bench export:
 * 5,000 results of 100,000 characters took 3.7x a COPY with PostgreSQL escaping everything).
 */
type PageRow = readonly [Uint8Array, Uint8Array, Uint8Array | null];

const RESULT_KEY = Buffer.from(',"result":');
const asBuffer = (b: Uint8Array) => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

/** Bytes a page's rows take before escaping (the next page's size is planned from it). */
function rawBytes(rows: readonly PageRow[]): number {
  let size = 0;
  for (const [line, , large] of rows) size += line.byteLength + 1 + (large ? large.byteLength : 0);
  return size;
}

/**
 * The page's lines, each followed by a newline, written into one buffer. A large result is
 * escaped from its bytes read as latin1 (one character per byte): JSON.stringify escapes only
 * `"`, `\` and characters below 0x20, all ASCII, so the bytes of multi-byte UTF-8 sequences
 * (all >= 0x80) pass through untouched and writing the string back as latin1 gives exactly the
 * bytes of decoding, stringifying and encoding as UTF-8, without either UTF-8 pass or a second
 * copy of the line. The buffer is sized for a few escapes and grows in the rare case it must.
 */
function joinLines(rows: readonly PageRow[]): Buffer {
  const raw = rawBytes(rows);
  let out = Buffer.allocUnsafe(raw + (raw >> 4) + 128);
  let pos = 0;
  const room = (n: number) => {
    if (pos + n <= out.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(out.length * 2, pos + n));
    out.copy(bigger, 0, 0, pos);
    out = bigger;
  };
  for (const [written, , large] of rows) {
    const line = asBuffer(written);
    if (large) {
      // The line's only `,"result":` with nothing after it is where the escaped result goes.
      const at = line.indexOf(RESULT_KEY) + RESULT_KEY.byteLength;
      const escaped = JSON.stringify(asBuffer(large).toString("latin1"));
      room(line.byteLength + escaped.length + 1);
      pos += line.copy(out, pos, 0, at);
      pos += out.write(escaped, pos, "latin1");
      pos += line.copy(out, pos, at);
    } else {
      room(line.byteLength + 1);
      pos += line.copy(out, pos);
    }
    out[pos++] = 0x0a;
  }
  return out.subarray(0, pos);
}

class ExportAborted extends Error {}

export function exportResultsStream(
  sql: postgres.Sql,
  args: { batchId: string; fetchRows?: number; fetchBytes?: number; stallMs?: number; signal?: AbortSignal },
): ReadableStream<Uint8Array> {
  const fetchRows = args.fetchRows ?? EXPORT_FETCH_ROWS;
  const fetchBytes = args.fetchBytes ?? EXPORT_FETCH_BYTES;
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

        // Each page is asked for before the previous one is encoded and handed over, so the
        // database writes it while this process encodes and the consumer reads. The first page
        // is small; each next one asks for one row more than the last one's sizes say fit in
        // fetchBytes, and the byte cut decides.
        const run = () =>
          sql.begin("isolation level repeatable read read only", async (tx) => {
            const page = (after: number, rows: number) =>
              tx.unsafe<PageRow[]>(EXPORT_PAGE, [args.batchId, after, rows, fetchBytes]).raw() as unknown as Promise<PageRow[]>;
            let rows = Math.min(64, fetchRows);
            let next = page(0, rows);
            for (;;) {
              const current = await next;
              check();
              if (current.length === 0) return;
              // The next page is asked for before this one is encoded, so the database writes it meanwhile.
              rows = Math.min(fetchRows, Math.ceil((current.length * fetchBytes) / rawBytes(current)) + 1);
              next = page(Number(asBuffer(current[current.length - 1]![1]).toString("latin1")), rows);
              // Observed at the next turn, or dropped with the transaction when the export stops.
              next.catch(() => {});
              const chunk = joinLines(current);
              await demand();
              controller.enqueue(exportChunk(chunk));
            }
          });

        trackExport(run()).then(
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
    // Counted in chunks: one page queued for the socket while the next is read.
    { highWaterMark: 1 },
  );
}
