import { randomFillSync } from "node:crypto";

/**
 * Time-ordered UUIDs (RFC 9562 version 7) for rows written in bulk. A random (version 4) primary
 * key puts every new row on a random leaf of its index; written in order, the keys of a bulk
 * write go to the index's right edge, where PostgreSQL appends without walking the tree. Measured
 * on 100,000 items (PostgreSQL 15): the submission's database CPU went from ~1.35 s to ~0.85 s.
 *
 * Layout: 48 bits of Unix milliseconds, the version, a 26-bit sequence (the 12 bits of rand_a and
 * the 14 after the variant; RFC 9562 6.2 method 1), then 48 random bits. The sequence restarts
 * when the clock has moved on since the last call and, past 2^26 ids in one millisecond, moves
 * to the next, so the ids of this process only grow. The ids still hold 48 random bits, and every
 * read is owner-scoped: an id is a name, never a capability.
 *
 * Not the `uuid` package's v7: it makes one id a call from its own buffer, ~10x this loop's time
 * for 100,000 ids here (528 ms against ~40-50 ms at load 20), on the submission's serial path.
 */
const SEQ_LIMIT = 2 ** 26;
const hexTable = (n: number, width: number, base = 0) =>
  Array.from({ length: n }, (_, i) => (base + i).toString(16).padStart(width, "0"));
let HIGH: string[] | undefined; // the top 12 bits of the sequence: rand_a
let LOW: string[] | undefined; // the variant (10) and the low 14 bits

let lastMs = 0;
let seq = -1;

/** n new ids, each greater than every id this process made before. */
export function orderedIds(n: number): string[] {
  HIGH ??= hexTable(4096, 3);
  LOW ??= hexTable(16384, 4, 0x8000);
  const random = randomFillSync(Buffer.allocUnsafe(n * 6)).toString("hex");
  const now = Date.now();
  if (now > lastMs) {
    lastMs = now;
    seq = -1;
  }
  let prefix = msPrefix(lastMs);
  const ids = new Array<string>(n);
  for (let i = 0; i < n; i++) {
    if (++seq === SEQ_LIMIT) {
      prefix = msPrefix(++lastMs);
      seq = 0;
    }
    ids[i] = `${prefix}${HIGH[seq >>> 14]}-${LOW[seq & 0x3fff]}-${random.slice(i * 12, i * 12 + 12)}`;
  }
  return ids;
}

function msPrefix(ms: number): string {
  const hex = ms.toString(16).padStart(12, "0");
  return `${hex.slice(0, 8)}-${hex.slice(8)}-7`;
}
