import "server-only";

/**
 * results.jsonl's lines, written by this process from the columns PostgreSQL sends as COPY would
 * (server/http/export.ts jsonlRows): each line byte for byte what JSON.stringify writes for
 * the item's wire line (lib/api/batches resultLineSchema; test/api/export-exactness.test.ts).
 *
 * Each item comes as one column, its row's text as PostgreSQL writes a record (record_out: fields
 * between ( and ), comma-separated, an empty field for null; a field quoted with " when it is
 * empty or holds a quote, backslash, parenthesis, comma or space, its " and \ then doubled).
 * One column a row, because postgres.js's cost is per column (19 columns of 100,000 rows took
 * about 1 s of this process's CPU; one column about 0.15 s), and writing a record costs
 * PostgreSQL about what COPY's text format costs.
 *
 * Bytes in, bytes out, no string in between: a text field is escaped as JSON.stringify escapes
 * it (`"`, `\`, and bytes below 0x20 as \b \f \n \r \t or lowercase \u00xx: what PostgreSQL's
 * to_json writes too), all ASCII, so the bytes of multi-byte UTF-8 sequences (all >= 0x80) are
 * copied untouched and no UTF-8 decoding or encoding is needed (building strings instead, a
 * JSON.stringify a column, cost about 0.9 s of CPU for 100,000 rows; this byte loop ~0.2 s).
 */

/** A fetch's rows, each column as the bytes PostgreSQL sent (null for SQL null). */
export type ExportRow = readonly (Uint8Array | null)[];

const bytes = (s: string) => new Uint8Array(Buffer.from(s, "latin1"));
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const SPACE = 0x20;
const COMMA = 0x2c;
const CLOSE = 0x29;
const HEX = bytes("0123456789abcdef");
/** The short escapes JSON.stringify writes (\b \t \n \f \r), by byte; 0 for \u00xx. */
const SHORT = new Uint8Array(0x20);
for (const [at, letter] of [[8, "b"], [9, "t"], [10, "n"], [12, "f"], [13, "r"]] as const) SHORT[at] = letter.charCodeAt(0);

// The line between its values, in the wire schema's key order.
const KEY = bytes('{"item_key":');
const INPUT = bytes(',"input":');
const POSITION = bytes(',"position":');
const STATUS = bytes(',"status":');
const ATTEMPTS = bytes(',"attempts":');
const RESULT = bytes(',"result":');
const ERROR = bytes(',"error":');
const EXPECTED = bytes(',"expected":');
const OUTPUT = bytes(',"output":');
const CHECKS = bytes(',"checks":');
const VERDICT = bytes(',"verdict":');
const REVIEW_STATE = bytes(',"review_state":');
const REVIEW_NOTE = bytes(',"review_note":');
const REVIEWED_OUTPUT = bytes(',"reviewed_output":');
const INPUT_TOKENS = bytes(',"usage":{"input_tokens":');
const OUTPUT_TOKENS = bytes(',"output_tokens":');
const CACHED_INPUT_TOKENS = bytes(',"cached_input_tokens":');
const CACHE_WRITE_TOKENS = bytes(',"cache_write_tokens":');
const END = bytes("}}\n");
const NULL = bytes("null");
const NO_CHECKS = bytes("[]");
/** Bytes a line takes besides its values. */
const FIXED = [KEY, INPUT, POSITION, STATUS, ATTEMPTS, RESULT, ERROR, EXPECTED, OUTPUT, CHECKS, VERDICT, REVIEW_STATE, REVIEW_NOTE, REVIEWED_OUTPUT]
  .concat([INPUT_TOKENS, OUTPUT_TOKENS, CACHED_INPUT_TOKENS, CACHE_WRITE_TOKENS, END])
  .reduce((n, b) => n + b.length, 0);
/** A boolean's first byte when true. */
const TRUE = "t".charCodeAt(0);

/**
 * Writes one fetch's lines into one buffer, reading each row's record text field by field (`at`
 * is the next field's first byte; each read leaves it past the comma or parenthesis after it).
 */
class LineWriter {
  out: Buffer;
  pos = 0;
  row: Uint8Array = new Uint8Array(0);
  at = 0;
  constructor(size: number) {
    this.out = Buffer.allocUnsafe(size);
  }
  /** Room for n more bytes (doubling in the rare case escapes outgrow the estimate). */
  room(n: number): void {
    if (this.pos + n <= this.out.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.out.length * 2, this.pos + n));
    this.out.copy(bigger, 0, 0, this.pos);
    this.out = bigger;
  }
  /** Starts a row: room for all it can become (every byte escaped as \u00xx), past its "(". */
  start(row: Uint8Array): void {
    this.row = row;
    this.at = 1;
    this.room(row.length * 6 + FIXED);
  }
  fixed(b: Uint8Array): void {
    const { out } = this;
    let pos = this.pos;
    for (let i = 0; i < b.length; i++) out[pos++] = b[i]!;
    this.pos = pos;
  }
  /** Whether the next field is null (empty and unquoted: an empty string is written ""). */
  isNull(): boolean {
    const c = this.row[this.at];
    return c === COMMA || c === CLOSE;
  }
  /** Passes a null field. */
  skip(): void {
    this.at++;
  }
  /** A boolean field: true when t. */
  flag(): boolean {
    const t = this.row[this.at] === TRUE;
    this.at += 2;
    return t;
  }
  /** A field as its own text (an integer; an object item's fields as JSON; jsonb's text), null as null. */
  verbatim(): void {
    if (this.isNull()) {
      this.null();
      return;
    }
    const { out, row } = this;
    let pos = this.pos;
    let i = this.at;
    if (row[i] === QUOTE) {
      for (i++; ; i++) {
        const c = row[i]!;
        // A doubled " or \ stands for one; a single " ends the field.
        if (c === QUOTE || c === BACKSLASH) {
          if (c === QUOTE && row[i + 1] !== QUOTE) break;
          i++;
        }
        out[pos++] = c;
      }
      i++;
    } else for (let c = row[i]!; c !== COMMA && c !== CLOSE; c = row[++i]!) out[pos++] = c;
    this.pos = pos;
    this.at = i + 1;
  }
  null(): void {
    this.at++;
    this.fixed(NULL);
  }
  /** A text field as a JSON string, as JSON.stringify escapes it; null as null. */
  text(): void {
    if (this.isNull()) {
      this.null();
      return;
    }
    const { out, row } = this;
    let pos = this.pos;
    let i = this.at;
    const quoted = row[i] === QUOTE;
    if (quoted) i++;
    out[pos++] = QUOTE;
    for (; ; i++) {
      const c = row[i]!;
      if (quoted ? c === QUOTE || c === BACKSLASH : c === COMMA || c === CLOSE) {
        if (!quoted) break;
        if (c === QUOTE && row[i + 1] !== QUOTE) {
          i++;
          break;
        }
        // A doubled " or \: one character, escaped.
        i++;
        out[pos++] = BACKSLASH;
        out[pos++] = c;
      } else if (c >= SPACE) out[pos++] = c;
      else {
        out[pos++] = BACKSLASH;
        if (SHORT[c] !== 0) out[pos++] = SHORT[c]!;
        else {
          out[pos++] = 0x75; // u00xx
          out[pos++] = 0x30;
          out[pos++] = 0x30;
          out[pos++] = HEX[c >> 4]!;
          out[pos++] = HEX[c & 15]!;
        }
      }
    }
    out[pos++] = QUOTE;
    this.pos = pos;
    this.at = i + 1;
  }
  /**
   * A jsonb field as compact JSON (null as null): jsonb writes `, ` and `: ` between members and
   * no other space outside strings, so every space outside a string is dropped (in place, after
   * the field is copied). What JSON.stringify writes for the value read back, with jsonb's
   * numbers and key order.
   */
  json(): void {
    if (this.isNull()) {
      this.null();
      return;
    }
    const from = this.pos;
    this.verbatim();
    const { out } = this;
    let pos = from;
    let inString = false;
    for (let i = from; i < this.pos; i++) {
      const c = out[i]!;
      if (inString) {
        out[pos++] = c;
        if (c === BACKSLASH) out[pos++] = out[++i]!;
        else if (c === QUOTE) inString = false;
      } else if (c !== SPACE) {
        out[pos++] = c;
        if (c === QUOTE) inString = true;
      }
    }
    this.pos = pos;
  }
}

/**
 * One fetch of jsonlRows' rows as `\n`-terminated lines, one chunk. Each row's one column is
 * the record (item_key, object_input, input, position, status, attempts, output, result, error,
 * expected, checks, verdict, review_state, review_note, reviewed_output, input_tokens,
 * output_tokens, cached_input_tokens, cache_write_tokens): object_input (t) says the input is an
 * object item's fields, written as they are; a typed answer's result is its output (and comes
 * null), so the output comes first and is written twice.
 */
export function jsonLines(rows: readonly ExportRow[]): Buffer {
  let size = 0;
  for (const [row] of rows) size += row!.length;
  const w = new LineWriter(size + (size >> 3) + rows.length * FIXED + 1024);
  for (const [row] of rows) {
    w.start(row!);
    w.fixed(KEY);
    w.text();
    w.fixed(INPUT);
    if (w.flag()) w.verbatim();
    else w.text();
    w.fixed(POSITION);
    w.verbatim();
    w.fixed(STATUS);
    w.text();
    w.fixed(ATTEMPTS);
    w.verbatim();
    w.fixed(RESULT);
    // The output, where the result goes; then the result (null when there is an output).
    const typed = !w.isNull();
    const output = w.pos;
    w.json();
    const outputEnd = w.pos;
    if (typed) w.skip();
    else {
      w.pos = output;
      w.text();
    }
    w.fixed(ERROR);
    w.text();
    w.fixed(EXPECTED);
    w.json();
    w.fixed(OUTPUT);
    if (typed) {
      w.room(outputEnd - output);
      w.pos += w.out.copy(w.out, w.pos, output, outputEnd);
    } else w.fixed(NULL);
    w.fixed(CHECKS);
    if (w.isNull()) {
      w.skip();
      w.fixed(NO_CHECKS);
    } else w.json();
    w.fixed(VERDICT);
    w.text();
    w.fixed(REVIEW_STATE);
    w.text();
    w.fixed(REVIEW_NOTE);
    w.text();
    w.fixed(REVIEWED_OUTPUT);
    w.json();
    w.fixed(INPUT_TOKENS);
    w.verbatim();
    w.fixed(OUTPUT_TOKENS);
    w.verbatim();
    w.fixed(CACHED_INPUT_TOKENS);
    w.verbatim();
    w.fixed(CACHE_WRITE_TOKENS);
    w.verbatim();
    w.fixed(END);
  }
  return w.out.subarray(0, w.pos);
}
