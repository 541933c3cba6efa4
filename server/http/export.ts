import "server-only";
import type postgres from "postgres";
import type { Verdict } from "@/lib/api/batch-data";
import { resultColumns } from "@/lib/result-columns";
import { parseItemStatus, parseVerdict } from "@/server/batches/repository";
import { createDatabase, type Database, databaseUrlFromEnv } from "@/server/db/client";
import { INDEX_ORDER_ONLY } from "@/server/db/index-order";
import type { ItemStatus } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { log } from "@/server/log";
import { exportChunk, trackExport } from "@/server/instruments";
import { cutConnection } from "./connections";
import { type ExportRow, jsonLines } from "./result-lines";

/**
 * results.jsonl and results.csv as byte streams: one READ ONLY, REPEATABLE READ transaction (so a
 * batch that is still running exports one consistent snapshot of every item, terminal or in
 * flight) reading one server-side cursor in position order, each fetch cut at EXPORT_FETCH_BYTES
 * of stored text. PostgreSQL writes every CSV line itself; a results.jsonl line is written here
 * from the item's record (result-lines.ts), bytes to bytes. Fetches are asked for only as the HTTP consumer reads (FETCH_AHEAD ahead), so memory
 * stays at a few fetches however large the batch or slow the client. An export holds its connection and snapshot at most
 * `exports.max_seconds`, and a user has at most EXPORTS_PER_USER of them open across every web
 * process (advisory locks held by the export's own transaction). Ownership must be checked by the
 * caller before streaming (the route answers 404 first).
 */

/** Stored text per fetch (at least one row): with results <= max_result_chars that is about 1 MB a fetch. */
export const EXPORT_FETCH_BYTES = 1024 * 1024;
/** Rows per fetch at most. */
export const EXPORT_FETCH_ROWS = 5_000;
/** Fetches of lines asked for ahead of the consumer (each at most EXPORT_FETCH_BYTES of stored text and one row). */
const FETCH_AHEAD = 2;
/** Rows' sizes read at once (a few bytes each). */
const SIZES_PER_FETCH = 20_000;
/** A client that stops reading for this long releases the snapshot and its connection. */
export const EXPORT_STALL_MS = 30_000;
/** Exports at once per web process; more wait for a connection of this pool, never one of the main pool. */
export const EXPORT_POOL_SIZE = 3;
/** A user's exports holding a snapshot at once, across every web process (one more: 429 too_many_exports). */
export const EXPORTS_PER_USER = 2;

const globalForExport = globalThis as unknown as { __flotillaExportDb?: Database; __flotillaExportsByUser?: Map<string, number> };

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
 * results.jsonl's rows: each item as one record of the columns its line needs (as COPY would
 * send them: text, every jsonb as jsonb writes it), from which this process writes the line
 * (server/http/result-lines.ts jsonLines, the field order it reads). PostgreSQL writing the lines
 * itself cost about 2.5x a COPY's CPU (issue 44: to_json's escaping, the ~35-part || chain, the
 * casts) and sent 66 MB of lines for COPY's 40 MB; split this way PostgreSQL does about a COPY's
 * work, and this process encodes a fetch while the next one is read.
 *
 * Values, not JSON inside strings: in a batch of object items an item's `input` is its fields as
 * the object they are (an explicit prompt among them stays text: `object_input` says which), and
 * a typed answer's `result` is the same value as its `output` (so the result is not sent then);
 * a string item's input and an untyped answer are text.
 */
function jsonlRows(filter: ExportFilter): string {
  return `
  select row(item_key, coalesce(${OBJECT_INPUT}, false), input, position, status, attempts, output,
             case when output is null then result end, error, expected, checks, verdict, review_state, review_note,
             reviewed_output, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens)::text
    from subagent_batch_items item, (${OBJECT_ITEMS}) batch
   where ${itemsWhere(filter)}
   order by position`;
}

/**
 * An object item's input (its fields as compact JSON) in a batch of object items. An explicit
 * prompt among them is its own prompt (an object item's prompt is its filled template or its
 * `prompt` field, never its whole fields), so it stays text even when it reads as a JSON object.
 */
const OBJECT_INPUT = "object_items and left(input, 1) = '{' and prompt <> input and flotilla_is_json_object(input)";

/** Whether batch $1 is one of object items (its spec names input fields): read once (an init plan). */
const OBJECT_ITEMS = `select coalesce(execution_spec -> 'input_fields', '[]') <> '[]'::jsonb as object_items from subagent_batches where id = $1`;

/** Which items an export holds: the items list's `?status=&verdict=` (either or both; none = every item). */
export interface ExportFilter {
  status?: ItemStatus;
  verdict?: Verdict;
}

/**
 * The items an export reads, of batch $1, as a WHERE clause. The filter's values are written as
 * literals, as the items list writes them (one of a fixed vocabulary, parsed before): the planner
 * then uses that status's or the failed verdict's partial index, which a bound parameter never matches.
 */
function itemsWhere(filter: ExportFilter): string {
  return [
    "batch_id = $1",
    filter.status ? `status = '${filter.status}'` : "",
    filter.verdict ? `verdict = '${filter.verdict}'` : "",
  ]
    .filter(Boolean)
    .join(" and ");
}

/**
 * The stored bytes of each item the export reads, in its order (octet_length and pg_column_size
 * read stored sizes without decompressing anything): what exportStream plans each fetch from.
 */
function storedSizes(filter: ExportFilter): string {
  return `select octet_length(item_key) + octet_length(input) + coalesce(octet_length(result), 0)
                 + coalesce(octet_length(error), 0) + coalesce(pg_column_size(output), 0)
                 + coalesce(pg_column_size(expected), 0) + coalesce(octet_length(review_note), 0)
                 + coalesce(pg_column_size(reviewed_output), 0)
            from subagent_batch_items
           where ${itemsWhere(filter)}
           order by position`;
}

const asBuffer = (b: Uint8Array) => (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength));

const CRLF = Buffer.from("\r\n");

/** A fetch of CSV lines as PostgreSQL wrote them (one column a row), each followed by CRLF, as one chunk. */
export function csvChunk(rows: readonly ExportRow[]): Buffer {
  let size = 0;
  for (const [line] of rows) size += line!.byteLength + CRLF.byteLength;
  const out = Buffer.allocUnsafe(size);
  let pos = 0;
  for (const [line] of rows) {
    pos += asBuffer(line!).copy(out, pos);
    pos += CRLF.copy(out, pos);
  }
  return out;
}

/** Why an export stopped before its end (the client went away or stalled, or it ran too long). */
class ExportAborted extends AppError {
  constructor(reason: string) {
    super("unavailable", `export stopped: ${reason}`);
  }
}

const tooManyExports = () =>
  new AppError(
    "too_many_exports",
    `exports: ${EXPORTS_PER_USER} downloads of yours are already in progress; try again when one has finished`,
  );

/**
 * This process's exports per user, from the request until the export's transaction ends (waiting
 * for a connection of the pool included). The same limit as the slots below, checked first so
 * that an export bound to be refused never waits for a connection (nor holds one to be refused).
 * On globalThis: every route bundle shares it, as it shares the pool.
 */
function exportsByUser(): Map<string, number> {
  globalForExport.__flotillaExportsByUser ??= new Map();
  return globalForExport.__flotillaExportsByUser;
}

/**
 * Takes one of the user's EXPORTS_PER_USER slots for the rest of the transaction (an advisory
 * lock per slot, released with the snapshot whatever ends it), or answers null when all are held.
 * CASE tries the next slot only when the one before is taken, so an export holds at most one.
 */
const TAKE_SLOT = `select case ${Array.from(
  { length: EXPORTS_PER_USER },
  (_, i) => `when pg_try_advisory_xact_lock(hashtextextended('flotilla:export:' || $1::text || ':${i}', 0)) then ${i}`,
).join(" ")} end as slot`;

export interface ExportArgs {
  batchId: string;
  /** The owner: an export holds one of this user's slots. */
  userId: string;
  /** `exports.max_seconds` in ms: the longest the export holds its connection and snapshot. */
  maxMs: number;
  filter?: ExportFilter;
  fetchRows?: number;
  fetchBytes?: number;
  stallMs?: number;
  signal?: AbortSignal;
  /** The request's connection (connectionKey): a cut destroys it, so nothing stays queued for the client. */
  connection?: string | null;
}

/**
 * `?status=&verdict=` (and for results.csv `?raw=1`) of an export: the items list's vocabularies
 * and messages; an unknown or repeated parameter is refused naming it.
 */
export function parseExportQuery(params: URLSearchParams, options: { raw: boolean }): { filter: ExportFilter; raw: boolean } {
  const seen = new Set<string>();
  for (const name of params.keys()) {
    if (seen.has(name)) throw new AppError("validation_failed", `${name}: given more than once`);
    seen.add(name);
    if (name !== "status" && name !== "verdict" && !(options.raw && name === "raw"))
      throw new AppError("validation_failed", `${name}: unknown query parameter`);
  }
  const raw = params.get("raw");
  if (raw !== null && raw !== "0" && raw !== "1") throw new AppError("validation_failed", "raw: must be 1 (cells verbatim) or 0");
  const status = parseItemStatus(params.get("status"));
  const verdict = parseVerdict(params.get("verdict"));
  return { filter: { ...(status ? { status } : {}), ...(verdict ? { verdict } : {}) }, raw: raw === "1" };
}

/** results.jsonl: one JSON line per item, `\n`-terminated. */
export function exportResultsStream(sql: postgres.Sql, args: ExportArgs): Promise<ReadableStream<Uint8Array>> {
  const filter = args.filter ?? {};
  return exportStream(sql, {
    ...args,
    lines: { sql: jsonlRows(filter), params: [args.batchId] },
    sizes: { sql: storedSizes(filter), params: [args.batchId] },
    write: jsonLines,
  });
}

/** A statement and its parameters. */
export interface Statement {
  sql: string;
  params: readonly unknown[];
}

/**
 * What an export streams: the rows of `lines`, each fetch of them made one chunk by `write`,
 * after `head`'s one row (a CSV's header). `sizes` reads the stored bytes of the same rows in
 * the same order, one number a row: each fetch of lines is sized from them.
 */
export interface ExportQuery {
  lines: Statement;
  sizes: Statement;
  write: (rows: readonly ExportRow[]) => Buffer;
  head?: Statement;
}

/**
 * The stream every export is (results.jsonl, results.csv, compare.csv): `head`, then the rows of
 * `lines`, one chunk a fetch (`write`). Resolves once the export holds its
 * snapshot and one of the user's slots (so the route can still answer 429); the stream then
 * errors (the response is cut, never ended as if complete) when the client stalls, goes away, or
 * the export outlives `maxMs`, and each of those releases the connection and the snapshot at once.
 */
export function exportStream(sql: postgres.Sql, args: ExportArgs & ExportQuery): Promise<ReadableStream<Uint8Array>> {
  const byUser = exportsByUser();
  const mine = byUser.get(args.userId) ?? 0;
  if (mine >= EXPORTS_PER_USER) return Promise.reject(tooManyExports());
  byUser.set(args.userId, mine + 1);
  const release = () => {
    const left = (byUser.get(args.userId) ?? 1) - 1;
    if (left > 0) byUser.set(args.userId, left);
    else byUser.delete(args.userId);
  };
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
  let opened!: () => void;
  let refused!: (err: unknown) => void;
  /** The route answered 200: from then on a failure cuts the response. */
  let answered = false;
  const ready = new Promise<void>((resolve, reject) => {
    opened = () => {
      answered = true;
      resolve();
    };
    refused = reject;
  });

  const stream = new ReadableStream<Uint8Array>(
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

        // Two cursors on the snapshot walk the same rows in the same order: one of each row's
        // stored bytes (a few bytes a row), from which each fetch of lines is sized so that the
        // text stored in its rows before the last stays under fetchBytes (at most fetchRows rows,
        // the first fetch at most 64 for a quick first byte); and the lines themselves, fetched
        // FETCH_AHEAD ahead of the consumer so the database writes while this process hands a
        // chunk over. Memory stays at a few fetches however large the batch or slow the client.
        const run = () =>
          sql.begin("isolation level repeatable read read only", async (tx) => {
            // The client may have gone while the export waited for a connection of the pool.
            check();
            const [held] = await tx.unsafe<{ slot: number | null }[]>(TAKE_SLOT, [args.userId]);
            await tx.unsafe(INDEX_ORDER_ONLY);
            // Held elsewhere: by this user's exports in other web processes.
            if (held?.slot === null || held?.slot === undefined) throw tooManyExports();
            const deadline = setTimeout(() => {
              stop ??= `it ran longer than exports.max_seconds (${Math.round(args.maxMs / 1000)} s)`;
              nudge();
            }, args.maxMs);
            deadline.unref();
            opened();
            try {
              const declare = (name: string, query: { sql: string; params: readonly unknown[] }) =>
                tx.unsafe(`declare ${name} no scroll cursor for ${query.sql}`, query.params as postgres.ParameterOrJSON<never>[]);
              await declare("flotilla_export_sizes", args.sizes);
              await declare("flotilla_export_lines", args.lines);
              if (args.head) {
                const [[head]] = (await tx.unsafe(args.head.sql, args.head.params as postgres.ParameterOrJSON<never>[]).raw()) as unknown as [[Uint8Array]];
                await demand();
                controller.enqueue(exportChunk(asBuffer(head)));
              }
              // The stored bytes of the rows not yet asked for, in order (sizes[at..]).
              let sizes: number[] = [];
              let at = 0;
              let sizesDone = false;
              /** How many rows the next fetch of lines takes (0: none left). */
              const plan = async (most: number): Promise<number> => {
                let rows = 0;
                let before = 0;
                while (rows < most && before < fetchBytes) {
                  if (at === sizes.length) {
                    if (sizesDone) break;
                    const got = (await tx.unsafe(`fetch ${SIZES_PER_FETCH} from flotilla_export_sizes`).raw()) as unknown as [Uint8Array][];
                    sizesDone = got.length < SIZES_PER_FETCH;
                    sizes = got.map(([size]) => Number(asBuffer(size).toString("latin1")));
                    at = 0;
                    continue;
                  }
                  before += sizes[at++]!;
                  rows++;
                }
                return rows;
              };
              const ahead: Promise<ExportRow[]>[] = [];
              /** Asks for the next fetch of lines; false when no row is left. */
              const fetchAhead = async (most: number): Promise<boolean> => {
                const rows = await plan(most);
                if (rows === 0) return false;
                const next = tx.unsafe(`fetch ${rows} from flotilla_export_lines`).raw() as unknown as Promise<ExportRow[]>;
                // Observed in its turn, or dropped with the transaction when the export stops.
                next.catch(() => {});
                ahead.push(next);
                return true;
              };
              if (await fetchAhead(Math.min(64, fetchRows))) while (ahead.length < FETCH_AHEAD && (await fetchAhead(fetchRows))) {}
              while (ahead.length > 0) {
                const current = await ahead.shift()!;
                check();
                await fetchAhead(fetchRows);
                const chunk = args.write(current);
                await demand();
                controller.enqueue(exportChunk(chunk));
              }
            } finally {
              clearTimeout(deadline);
            }
          });

        trackExport(run().finally(release)).then(
          () => {
            if (!bodyCancelled) controller.close();
          },
          (err) => {
            refused(err);
            // A fetch may still wait for demand that will never come: let it go.
            stop ??= "the export failed";
            nudge();
            if (err instanceof ExportAborted) log.info({ batchId: args.batchId, reason: err.message }, "export stopped");
            else if (!(err instanceof AppError)) log.error({ err, batchId: args.batchId }, "export failed");
            if (!bodyCancelled) controller.error(err);
            // Erroring the body does not close the socket while Next waits for it to drain.
            if (answered) cutConnection(args.connection);
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
    // Counted in chunks: one fetch queued for the socket while the next ones are read.
    { highWaterMark: 1 },
  );
  return ready.then(() => stream);
}

/** The results table of a batch: the columns results.csv writes after item_key and status. */
export interface CsvPlan {
  /** Object items' field names ([] for string items: one "input" column). */
  inputFields: readonly string[];
  /** The output schema's top-level properties ([] without one: one "result" column). */
  outputFields: readonly string[];
  checks: readonly string[];
}

/**
 * The header row's names (named as the panel's Results table names them: lib/result-columns.ts).
 * A batch of object items has an `expected` column after its input fields (empty for an item
 * without one): only object items carry `expected`, so the column depends on the batch's shape,
 * never on its data. It counts as an input name, so an output property named `expected` is
 * written `output.expected`, like any output property an input field shares its name with. A
 * person's corrected answer is split as the model's is: `reviewed_output.<property>` per output
 * column (else one `reviewed_output`). Words are the API's (`succeeded`), as in every file.
 */
export function csvColumns(plan: CsvPlan): string[] {
  const objects = plan.inputFields.length > 0;
  const columns = resultColumns({
    input_fields: objects ? [...plan.inputFields, "expected"] : [],
    output_fields: plan.outputFields,
    checks: plan.checks.map((name) => ({ name })),
  });
  return [
    "item_key",
    "status",
    ...(objects ? columns.input : ["input"]),
    ...(columns.output.length > 0 ? columns.output.map((c) => c.header) : ["result"]),
    ...columns.checks,
    "verdict",
    "attempts",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "cost_usd",
    "duration_ms",
    "error",
    "review_state",
    "review_note",
    ...(columns.output.length > 0 ? columns.output.map((c) => `reviewed_output.${c.field}`) : ["reviewed_output"]),
  ];
}

/**
 * Every text cell is quoted (`"` doubled), numbers and the fixed words (status, verdict, check
 * outcomes) are not. A CSV is made to be opened in a spreadsheet: a cell (a header name too)
 * that could start a formula gets a leading `'` (flotilla_csv_guard, export.sql: the one place
 * that rule lives, for every CSV), so a spreadsheet shows it as text instead of evaluating it
 * (OWASP, CSV injection); such a number (a negative one) becomes a quoted text cell. `?raw=1`
 * writes every cell verbatim for programs that read the data, and results.jsonl is always exact.
 */
export const cellSql = (raw: boolean) => ({
  text: (column: string) =>
    raw
      ? `coalesce('"' || replace(${column}, '"', '""') || '"', '')`
      : `coalesce('"' || flotilla_csv_guard(${column}) || replace(${column}, '"', '""') || '"', '')`,
  json: (value: string) => (raw ? `flotilla_csv_value(${value})` : `flotilla_csv_cell(${value})`),
  /** A number that is negative only when clocks disagree (a duration). */
  number: (value: string) => (raw ? value : `flotilla_csv_guard_number(${value})`),
});

/**
 * A CSV's header row (CRLF-terminated), each name a text cell as cellSql writes it; `bom` puts a
 * UTF-8 byte order mark first (a spreadsheet reads a file without one in the locale's code page:
 * Zoë, € garbled).
 */
export function csvHead(names: readonly string[], raw: boolean, bom = false): { sql: string; params: readonly unknown[] } {
  return {
    sql: `select ${bom ? "chr(65279) || " : ""}array_to_string(array(select ${cellSql(raw).text("t.name")} from jsonb_array_elements_text($1::jsonb) with ordinality as t(name, i) order by t.i), ',') || E'\\r\\n'`,
    params: [JSON.stringify(names)],
  };
}

/**
 * The name of a download: `batch-<id>-results.csv`, and a filtered or raw one says so
 * (`batch-<id>-results.failed.csv`, `….verdict-failed.csv`, `….raw.csv`), so it never
 * overwrites the full file in a downloads folder.
 */
export function exportFileName(batchId: string, ext: "csv" | "jsonl", query: { filter: ExportFilter; raw?: boolean }): string {
  const { status, verdict } = query.filter;
  const tags = [status, verdict && `verdict-${verdict}`, query.raw && "raw"].filter(Boolean);
  return `batch-${batchId}-results${tags.map((t) => `.${t}`).join("")}.${ext}`;
}

/**
 * The results.csv lines of batch `batchId` ($1). Names travel as parameters after it (each list
 * of names one JSON array, as the export pool knows no array types), only those the lines use.
 */
function csvLines(batchId: string, plan: CsvPlan, filter: ExportFilter, raw: boolean): Statement {
  const params: unknown[] = [batchId];
  const names = (list: readonly string[]) => {
    params.push(JSON.stringify(list));
    const at = params.length;
    return (i: number) => `($${at}::jsonb ->> ${i})`;
  };
  const cell = cellSql(raw);
  const objects = plan.inputFields.length > 0;
  const field = objects ? names(plan.inputFields) : undefined;
  const property = plan.outputFields.length > 0 ? names(plan.outputFields) : undefined;
  const check = plan.checks.length > 0 ? names(plan.checks) : undefined;
  const checkCell = (i: number) =>
    `case when checks @> jsonb_build_array(jsonb_build_object('name', ${check!(i)}, 'passed', false)) then 'failed'
          when checks @> jsonb_build_array(jsonb_build_object('name', ${check!(i)}, 'passed', true)) then 'passed' else '' end`;
  const cells = [
    cell.text("item_key"),
    "status::text",
    ...(field ? [...plan.inputFields.map((_, i) => cell.json(`fields -> ${field(i)}`)), cell.json("expected")] : [cell.text("input")]),
    ...(property ? plan.outputFields.map((_, i) => cell.json(`output -> ${property(i)}`)) : [cell.text("result")]),
    ...plan.checks.map((_, i) => checkCell(i)),
    "coalesce(verdict, '')",
    "attempts::text",
    "input_tokens::text",
    "output_tokens::text",
    "cached_input_tokens::text",
    "cache_write_tokens::text",
    "cost_usd::text",
    `coalesce(${cell.number("round(extract(epoch from finished_at - started_at) * 1000)::bigint::text")}, '')`,
    cell.text("error"),
    "coalesce(review_state, '')",
    cell.text("review_note"),
    ...(property ? plan.outputFields.map((_, i) => cell.json(`reviewed_output -> ${property(i)}`)) : [cell.json("reviewed_output")]),
  ];
  // Joined from an array, not with ||: a schema of thousands of properties would nest the
  // expression past PostgreSQL's stack depth. No cell is null (array_to_string would drop it).
  // An object item's input is its fields as compact JSON; an explicit prompt among them is not JSON.
  const fields = objects ? "case when left(input, 1) = '{' then flotilla_jsonb_or_null(input) end" : "null::jsonb";
  const lines = `
  select array_to_string(array[${cells.join(", ")}], ',')
    from (select *, ${fields} as fields from subagent_batch_items where ${itemsWhere(filter)}) item
   order by position`;
  return { sql: lines, params };
}

/**
 * results.csv (RFC 4180, UTF-8, CRLF): a header row, then one row per item in position order,
 * made for a spreadsheet unless `raw` (see cellSql; a UTF-8 byte order mark first).
 */
export function exportCsvStream(
  sql: postgres.Sql,
  args: ExportArgs & { plan: CsvPlan; raw?: boolean },
): Promise<ReadableStream<Uint8Array>> {
  const { plan } = args;
  const raw = args.raw ?? false;
  return exportStream(sql, {
    ...args,
    lines: csvLines(args.batchId, plan, args.filter ?? {}, raw),
    sizes: { sql: storedSizes(args.filter ?? {}), params: [args.batchId] },
    head: csvHead(csvColumns(plan), raw, !raw),
    write: csvChunk,
  });
}
