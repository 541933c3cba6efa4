import { describe, expect, it } from "vitest";
import { encodeResultLines, type RawExportRow } from "@/server/http/jsonl";

interface Line {
  item_key: string;
  input: string;
  position: number;
  status: string;
  attempts: number;
  result: string | null;
  error: string | null;
  usage: { input_tokens: number; output_tokens: number };
}

const bytes = (s: string | null) => (s === null ? null : Buffer.from(s, "utf8"));
const raw = (l: Line): RawExportRow => [
  bytes(l.item_key),
  bytes(String(l.position)),
  bytes(l.status),
  bytes(String(l.attempts)),
  bytes(l.result),
  bytes(l.error),
  bytes(String(l.usage.input_tokens)),
  bytes(String(l.usage.output_tokens)),
  bytes(l.input),
];
const expected = (lines: Line[]) => lines.map((l) => `${JSON.stringify(l)}\n`).join("");

function line(result: string | null, error: string | null = null, key = "item-1"): Line {
  return { item_key: key, input: `Lisbon "old town" ${key}`, position: 7, status: "succeeded", attempts: 2, result, error, usage: { input_tokens: 12, output_tokens: 9_007_199 } };
}

/** Deterministic pseudo-random text drawn from every class the escaper distinguishes. */
function randomText(seed: number, length: number): string {
  const pool = [
    ..."abcXYZ019 /'`<>&{}[]",
    '"',
    "\\",
    "\n",
    "\r",
    "\t",
    "\b",
    "\f",
    "\u0000",
    "\u0001",
    "\u001f",
    "\u007f",
    "é",
    "✓",
    "\u2028",
    "\u2029",
    "😀",
    "中文",
  ];
  let x = seed;
  let out = "";
  while (out.length < length) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    out += pool[x % pool.length];
  }
  return out;
}

describe("encodeResultLines", () => {
  it("writes exactly what JSON.stringify writes, for every escape class", () => {
    const cases = [
      line("plain"),
      line(""),
      line(null, "boom"),
      line(null, null),
      line('quote " backslash \\ slash / newline \n tab \t cr \r bs \b ff \f nul \u0000 us \u001f del \u007f'),
      line("unicode é ✓ 中文 😀 \u2028 \u2029", "err \n with \"quotes\"", 'key "with" \\ odd\nchars'),
    ];
    for (let seed = 1; seed <= 200; seed++) cases.push(line(randomText(seed, seed * 13), seed % 3 ? null : randomText(seed + 7, 50)));
    expect(encodeResultLines(cases.map(raw)).toString("utf8")).toBe(expected(cases));
  });

  it("grows its buffer when escapes outgrow the estimate", () => {
    // Every character of these results becomes a six-byte \u00xx escape.
    const controls = Array.from({ length: 20 }, (_, i) => line("\u0001".repeat(5_000 + i), null, `k${i}`));
    expect(encodeResultLines(controls.map(raw)).toString("utf8")).toBe(expected(controls));
  });

  it("round-trips a 100,000-character result and sizes the buffer exactly", () => {
    const big = line(randomText(42, 100_000));
    const out = encodeResultLines([big, line("x"), big].map(raw));
    expect(out.byteLength).toBe(Buffer.byteLength(expected([big, line("x"), big])));
    const parsed = out.toString("utf8").trimEnd().split("\n").map((l) => JSON.parse(l) as Line);
    expect(parsed[0]).toEqual(big);
    expect(parsed[2]).toEqual(big);
  });

  it("encodes nothing for no rows and refuses a NULL number", () => {
    expect(encodeResultLines([]).byteLength).toBe(0);
    const broken = [...raw(line("x"))];
    broken[1] = null;
    expect(() => encodeResultLines([broken])).toThrow(/numeric column/);
  });
});
