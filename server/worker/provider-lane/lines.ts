/**
 * A provider's results file read as a stream of lines, in time linear in its size and memory
 * bounded by one line: never the whole file as one string (V8 refuses one past 512 MiB, and
 * holding it costs its size twice over), never a line rescanned as more of it arrives.
 */

/** A results line longer than this is not read: its request goes the way of one with no result. */
export const MAX_RESULT_LINE_BYTES = 8 * 1024 * 1024;

/**
 * Each line of `body` (without its end of line, blank ones left out) as text, or null for a line
 * longer than `maxBytes`: its bytes are dropped as they arrive and the caller counts it.
 */
export async function* readLines(body: AsyncIterable<Uint8Array>, maxBytes = MAX_RESULT_LINE_BYTES): AsyncGenerator<string | null> {
  let parts: Uint8Array[] = [];
  let size = 0;
  let tooLong = false;
  const take = (piece: Uint8Array) => {
    if (tooLong) return;
    if (size + piece.byteLength > maxBytes) {
      tooLong = true;
      parts = [];
      return;
    }
    if (piece.byteLength > 0) parts.push(piece);
    size += piece.byteLength;
  };
  const finish = (): string | null | undefined => {
    const line = tooLong ? null : Buffer.concat(parts, size).toString("utf8").trim();
    parts = [];
    size = 0;
    tooLong = false;
    return line === "" ? undefined : line;
  };
  for await (const chunk of body) {
    let start = 0;
    for (let end = chunk.indexOf(10, start); end >= 0; end = chunk.indexOf(10, start)) {
      take(chunk.subarray(start, end));
      const line = finish();
      if (line !== undefined) yield line;
      start = end + 1;
    }
    // The rest belongs to a line that ends in a later chunk (copied: the chunk's buffer may be reused).
    if (start < chunk.byteLength) take(Buffer.from(chunk.subarray(start)));
  }
  const last = finish();
  if (last !== undefined) yield last;
}
