import "server-only";
import type postgres from "postgres";
import { resultColumns } from "@/lib/result-columns";
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
 * writes (test/api/export-exactness.test.ts); `output` and `checks` are compact JSON
 * (flotilla_json_text, server/batches/sql/export.sql), their numbers as jsonb writes them (which
 * differs from JSON.stringify only in exponent form: 1e-7, 1e21); an item without them never
 * calls that function (a call costs microseconds a row even for null). A page takes rows after position $2 while the text
 * stored in the rows before each one stays under $4 bytes, at most $3 rows; octet_length reads
 * stored sizes without decompressing anything. Measured on 100,000 small rows (bench/scale):
 * encoding lines in this process cost 5x a COPY of the same rows; PostgreSQL writes them at
 * nearly COPY's speed.
 */
/** Results longer than this (stored bytes) are escaped by this process, not by PostgreSQL. */
export const LARGE_RESULT_BYTES = 16 * 1024;

const JSONL_PAGE = `
  select '{"item_key":' || to_json(item_key)::text || ',"input":' || to_json(input)::text
      || ',"position":' || position || ',"status":' || to_json(status)::text || ',"attempts":' || attempts
      || ',"result":' || case when octet_length(result) > ${LARGE_RESULT_BYTES} then '' else coalesce(to_json(result)::text, 'null') end
      || ',"error":' || coalesce(to_json(error)::text, 'null')
      || ',"output":' || case when output is null then 'null' else flotilla_json_text(output) end
      || ',"checks":' || case when checks is null then '[]' else flotilla_json_text(checks) end
      || ',"verdict":' || coalesce(to_json(verdict)::text, 'null')
      || ',"usage":{"input_tokens":' || input_tokens || ',"output_tokens":' || output_tokens || '}}',
         position,
         case when octet_length(result) > ${LARGE_RESULT_BYTES} then result end
    from (${pageRows("item_key, input, position, status, attempts, result, error, output, checks, verdict, input_tokens, output_tokens")}) page
   where before < $4
   order by position`;

/**
 * The rows of one page: those after position $2 of batch $1, at most $3, each with the stored
 * bytes of the rows before it in the page (`before`; the caller keeps rows while it is under $4).
 */
function pageRows(columns: string): string {
  return `select ${columns},
                 coalesce(sum(octet_length(item_key) + octet_length(input) + coalesce(octet_length(result), 0)
                              + coalesce(octet_length(error), 0) + coalesce(pg_column_size(output), 0))
                            over (order by position rows between unbounded preceding and 1 preceding), 0) as before
            from subagent_batch_items
           where batch_id = $1 and position > $2
           order by position
           limit $3`;
}

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
 * The page's lines, each followed by `eol`, written into one buffer. A large result is
 * escaped from its bytes read as latin1 (one character per byte): JSON.stringify escapes only
 * `"`, `\` and characters below 0x20, all ASCII, so the bytes of multi-byte UTF-8 sequences
 * (all >= 0x80) pass through untouched and writing the string back as latin1 gives exactly the
 * bytes of decoding, stringifying and encoding as UTF-8, without either UTF-8 pass or a second
 * copy of the line. The buffer is sized for a few escapes and grows in the rare case it must.
 */
function joinLines(rows: readonly PageRow[], eol: Buffer): Buffer {
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
      room(line.byteLength + escaped.length + eol.byteLength);
      pos += line.copy(out, pos, 0, at);
      pos += out.write(escaped, pos, "latin1");
      pos += line.copy(out, pos, at);
    } else {
      room(line.byteLength + eol.byteLength);
      pos += line.copy(out, pos);
    }
    pos += eol.copy(out, pos);
  }
  return out.subarray(0, pos);
}

class ExportAborted extends Error {}

export interface ExportArgs {
  batchId: string;
  fetchRows?: number;
  fetchBytes?: number;
  stallMs?: number;
  signal?: AbortSignal;
}

/** results.jsonl: one JSON line per item, `\n`-terminated. */
export function exportResultsStream(sql: postgres.Sql, args: ExportArgs): ReadableStream<Uint8Array> {
  return exportStream(sql, { ...args, page: JSONL_PAGE, params: [], eol: Buffer.from("\n") });
}

/**
 * The stream every export is: `head`, then pages of `page` (its $1..$4 as JSONL_PAGE's, then
 * `params`), each row a finished line followed by `eol`.
 */
function exportStream(
  sql: postgres.Sql,
  args: ExportArgs & { page: string; params: readonly unknown[]; eol: Buffer; head?: Buffer },
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
              tx
                .unsafe<PageRow[]>(args.page, [args.batchId, after, rows, fetchBytes, ...args.params] as postgres.ParameterOrJSON<never>[])
                .raw() as unknown as Promise<PageRow[]>;
            let rows = Math.min(64, fetchRows);
            if (args.head) {
              await demand();
              controller.enqueue(exportChunk(args.head));
            }
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
              const chunk = joinLines(current, args.eol);
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

/** The results table of a batch: the columns results.csv writes after item_key and status. */
export interface CsvPlan {
  /** Object items' field names ([] for string items: one "input" column). */
  inputFields: readonly string[];
  /** The output schema's top-level properties ([] without one: one "result" column). */
  outputFields: readonly string[];
  checks: readonly string[];
}

/** The header row's names (named as the panel's Results table names them: lib/result-columns.ts). */
export function csvColumns(plan: CsvPlan): string[] {
  const columns = resultColumns({
    input_fields: plan.inputFields,
    output_fields: plan.outputFields,
    checks: plan.checks.map((name) => ({ name })),
  });
  return [
    "item_key",
    "status",
    ...(columns.input.length > 0 ? columns.input : ["input"]),
    ...(columns.output.length > 0 ? columns.output.map((c) => c.header) : ["result"]),
    ...columns.checks,
    "verdict",
    "attempts",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "duration_ms",
    "error",
  ];
}

/**
 * Every text cell is quoted (`"` doubled), numbers and the fixed words (status, verdict, check
 * outcomes) are not. Cells are written verbatim: one that starts with = + - @ is not altered
 * against spreadsheet formula injection, since RFC 4180 has no such rule and prefixing would
 * change the data a program reads; quoting keeps a cell one cell, and a spreadsheet that
 * evaluates what it imports is the reader's to configure.
 */
const quoted = (text: string) => `"${text.replaceAll('"', '""')}"`;
const csvText = (column: string) => `coalesce('"' || replace(${column}, '"', '""') || '"', '')`;

/**
 * A page of results.csv lines. Names travel as parameters after the page's four (each list of
 * names one JSON array, as the export pool knows no array types), only those the page uses.
 */
function csvPage(plan: CsvPlan): { page: string; params: unknown[] } {
  const params: unknown[] = [];
  const names = (list: readonly string[]) => {
    params.push(JSON.stringify(list));
    const at = params.length + 4;
    return (i: number) => `($${at}::jsonb ->> ${i})`;
  };
  const objects = plan.inputFields.length > 0;
  const field = objects ? names(plan.inputFields) : undefined;
  const property = plan.outputFields.length > 0 ? names(plan.outputFields) : undefined;
  const check = plan.checks.length > 0 ? names(plan.checks) : undefined;
  const checkCell = (i: number) =>
    `case when checks @> jsonb_build_array(jsonb_build_object('name', ${check!(i)}, 'passed', false)) then 'failed'
          when checks @> jsonb_build_array(jsonb_build_object('name', ${check!(i)}, 'passed', true)) then 'passed' else '' end`;
  const cells = [
    csvText("item_key"),
    "status",
    ...(field ? plan.inputFields.map((_, i) => `flotilla_csv_value(fields -> ${field(i)})`) : [csvText("input")]),
    ...(property ? plan.outputFields.map((_, i) => `flotilla_csv_value(output -> ${property(i)})`) : [csvText("result")]),
    ...plan.checks.map((_, i) => checkCell(i)),
    "coalesce(verdict, '')",
    "attempts::text",
    "input_tokens::text",
    "output_tokens::text",
    "cost_usd::text",
    "coalesce(round(extract(epoch from finished_at - started_at) * 1000)::bigint::text, '')",
    csvText("error"),
  ];
  // Joined from an array, not with ||: a schema of thousands of properties would nest the
  // expression past PostgreSQL's stack depth. No cell is null (array_to_string would drop it).
  // An object item's input is its fields as compact JSON; an explicit prompt among them is not JSON.
  const fields = objects ? "case when left(input, 1) = '{' then flotilla_jsonb_or_null(input) end" : "null::jsonb";
  const page = `
  select array_to_string(array[${cells.join(", ")}], ','), position, null::text
    from (select *, ${fields} as fields
            from (${pageRows("item_key, input, position, status, attempts, result, error, output, checks, verdict, input_tokens, output_tokens, cost_usd, started_at, finished_at")}) r) page
   where before < $4
   order by position`;
  return { page, params };
}

/** results.csv (RFC 4180, UTF-8, CRLF): a header row, then one row per item in position order. */
export function exportCsvStream(sql: postgres.Sql, args: ExportArgs & { plan: CsvPlan }): ReadableStream<Uint8Array> {
  const { plan } = args;
  return exportStream(sql, {
    ...args,
    ...csvPage(plan),
    head: Buffer.from(`${csvColumns(plan).map(quoted).join(",")}\r\n`),
    eol: Buffer.from("\r\n"),
  });
}
