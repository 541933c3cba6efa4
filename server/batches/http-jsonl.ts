/**
 * Turns one cursor fetch of raw export columns into JSONL bytes: one explicit result-line
 * object per row (the export projection, key by key), JSON.stringify for escaping (V8's
 * native serializer beat a hand-written byte-level escaper about 2:1 on 100k-character
 * results), and one exactly sized buffer per fetch so each byte is copied once more at most.
 */

/** Raw export columns, in this order: item_key, position, status, attempts, result, error, input_tokens, output_tokens. */
export type RawExportRow = readonly (Uint8Array | null)[];

const text = (b: Uint8Array | null | undefined): string | null =>
  b === null || b === undefined ? null : Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("utf8");

/** Integers arrive as decimal text. */
function int(b: Uint8Array | null | undefined): number {
  const s = text(b);
  if (s === null) throw new Error("export: a numeric column was NULL");
  return Number(s);
}

export function toResultLineJson(row: RawExportRow): string {
  return JSON.stringify({
    item_key: text(row[0]),
    position: int(row[1]),
    status: text(row[2]),
    attempts: int(row[3]),
    result: text(row[4]),
    error: text(row[5]),
    usage: { input_tokens: int(row[6]), output_tokens: int(row[7]) },
  });
}

/** The JSONL lines of several rows in one exactly sized buffer. */
export function encodeResultLines(rows: readonly RawExportRow[]): Buffer {
  const lines = rows.map(toResultLineJson);
  let total = 0;
  for (const line of lines) total += Buffer.byteLength(line, "utf8") + 1;
  const out = Buffer.allocUnsafe(total);
  let pos = 0;
  for (const line of lines) {
    pos += out.write(line, pos, "utf8");
    out[pos++] = 0x0a;
  }
  return out;
}
