/**
 * Any text is storable (DESIGN "Holding under abuse (third round)"). PostgreSQL `text` refuses
 * U+0000 ("invalid byte sequence for encoding UTF8: 0x00") and `jsonb` refuses the escapes of
 * U+0000 and of lone surrogates ("unsupported Unicode escape sequence"); a model, a tool, a judge
 * or a person can hand us any of them, and cutting a string at a length can split a surrogate
 * pair. The one rule, applied at every write of such content: each of them becomes U+FFFD.
 *
 * Three shapes of the same rule: `storableText` for one string, `storable` for a value a
 * drizzle insert serializes (strings deep, object keys included), `storableJson` for the JSON
 * text the prepared statements cast to jsonb (the worker's settle, steps and run rows): it fixes
 * JSON.stringify's output in one scan instead of copying the value first.
 */

/** Any character the rule may touch: the cheap test that lets clean strings through untouched. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching U+0000 is the point
const SUSPECT = /[\u0000\ud800-\udfff]/;
/** NUL, a high surrogate without its low one, a low surrogate without its high one. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching U+0000 is the point
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
/**
 * In JSON.stringify's output, the escape of NUL or of a surrogate (it escapes only lone ones,
 * pairs come out as characters), not preceded by an odd number of backslashes (`\\u0000` is the
 * six characters `\u0000` of the original text, which are fine).
 */
const UNSTORABLE_ESCAPE = /(?<!\\)((?:\\\\)*)\\u(?:0000|d[89a-f][0-9a-f]{2})/g;

const REPLACEMENT = "\ufffd";

/** The text with U+0000 and lone surrogates replaced by U+FFFD (the same string when it has none). */
export function storableText(text: string): string;
export function storableText(text: string | null | undefined): string | null | undefined;
export function storableText(text: string | null | undefined): string | null | undefined {
  if (typeof text !== "string" || !SUSPECT.test(text)) return text;
  return text.replace(UNSTORABLE, REPLACEMENT);
}

/**
 * The value with every string of it storable, object keys included, through arrays and plain
 * objects (anything else, a Date or a Buffer, is kept as it is). Unchanged parts are the same
 * objects, so a clean value costs a walk and no copy.
 */
export function storable<T>(value: T): T {
  return clean(value, 0) as T;
}

/** Deeper than any JSON a model or a person sends; past it a value is kept as it is. */
const MAX_DEPTH = 256;

function clean(value: unknown, depth: number): unknown {
  if (typeof value === "string") return storableText(value);
  if (value === null || typeof value !== "object" || depth > MAX_DEPTH) return value;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const v = clean(value[i], depth + 1);
      if (v === value[i]) continue;
      out ??= value.slice();
      out[i] = v;
    }
    return out ?? value;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  let out: Record<string, unknown> | undefined;
  const entries = Object.entries(value);
  for (let i = 0; i < entries.length; i++) {
    const [k, v] = entries[i]!;
    const key = storableText(k);
    const cleaned = clean(v, depth + 1);
    if (!out && (key !== k || cleaned !== v)) out = Object.fromEntries(entries.slice(0, i));
    if (out) out[key] = cleaned;
  }
  return out ?? value;
}

/** JSON.stringify(value) as PostgreSQL's jsonb takes it: escapes of NUL and lone surrogates become U+FFFD. */
export function storableJson(value: unknown): string {
  const json = JSON.stringify(value);
  return json.includes("\\u") ? json.replace(UNSTORABLE_ESCAPE, `$1${REPLACEMENT}`) : json;
}
