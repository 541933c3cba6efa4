import { turnEvery } from "@/server/runtime/next-turn";

/**
 * Counting a text's tokens the way a model's tokenizer does, in bounded time. OpenAI models
 * are counted exactly with their tiktoken encoding (js-tiktoken's ranks and split pattern);
 * others at ~4 characters a token.
 *
 * js-tiktoken's own encoder is not used: its merge rescans and re-joins every pair after each
 * merge (quadratic in a piece's bytes, with a large constant), so one unbroken run of 12,000
 * letters held the event loop 17.8 s, and loading its ranks held it ~3 s. Here a piece is
 * merged with a heap (the same lowest-rank, leftmost-first order: the same tokens, in
 * O(n log n)), the ranks load in slices, and counting lets the event loop run every few
 * milliseconds, whatever the text.
 */

export type TokensMethod = "tiktoken" | "approx";

export interface TokenCounter {
  method: TokensMethod;
  /** The text's tokens (0 for ""). */
  count(text: string): Promise<number>;
}

/** The model a text is counted for: its provider and model id. */
export interface CountedModel {
  provider: string;
  model: string;
}

/** An OpenAI model: a native openai entry, or a compatible one serving an OpenAI model id. */
const OPENAI_MODEL_ID = /^(gpt-|chatgpt-|o1|o3|o4)/i;
function isOpenAiModel(m: CountedModel): boolean {
  return m.provider === "openai" || (m.provider === "openai-compatible" && OPENAI_MODEL_ID.test(m.model));
}

type EncodingName = "o200k_base" | "cl100k_base";

/** The encoding an OpenAI model id uses: o200k_base from gpt-4o and the o-series on, cl100k_base before. */
function encodingOf(model: string): EncodingName {
  return /^(gpt-3\.5|gpt-4(?!o|\.))/i.test(model) ? "cl100k_base" : "o200k_base";
}

const approx: TokenCounter = { method: "approx", count: async (text) => Math.ceil(text.length / 4) };

/** How `model`'s texts are counted (loads its encoding once per process, letting the event loop run). */
export async function tokenCounter(model: CountedModel): Promise<TokenCounter> {
  if (!isOpenAiModel(model)) return approx;
  const encoding = await loadEncoding(encodingOf(model.model));
  return { method: "tiktoken", count: (text) => countTokens(encoding, text) };
}

interface Encoding {
  /** The split pattern's source (pieces are merged one at a time, never across). */
  pattern: string;
  /** Token byte sequences (as latin1 strings, one character a byte) to their rank. */
  ranks: Map<string, number>;
}

// One per encoding per process: its ranks are megabytes, loaded on first use only.
const encodings = new Map<EncodingName, Promise<Encoding>>();
function loadEncoding(name: EncodingName): Promise<Encoding> {
  let found = encodings.get(name);
  if (!found) {
    found = readRanks(name);
    encodings.set(name, found);
    found.catch(() => encodings.delete(name));
  }
  return found;
}

/** The ranks file (`! <offset> <base64 token> ...`: ranks count up from the offset) read into a map, a slice at a time. */
async function readRanks(name: EncodingName): Promise<Encoding> {
  const file = (name === "o200k_base" ? await import("js-tiktoken/ranks/o200k_base") : await import("js-tiktoken/ranks/cl100k_base")).default;
  const ranks = new Map<string, number>();
  const breathe = turnEvery(10);
  for (const line of file.bpe_ranks.split("\n")) {
    if (!line) continue;
    const words = line.split(" ");
    const offset = Number(words[1]);
    for (let i = 2; i < words.length; i++) {
      ranks.set(Buffer.from(words[i]!, "base64").toString("latin1"), offset + i - 2);
      if ((i & 1023) === 0) await breathe();
    }
  }
  return { pattern: file.pat_str, ranks };
}

const NON_ASCII = /[\u0080-\uffff]/;

/** The text's tokens under `encoding`, as js-tiktoken's encode(text, [], []) counts them (special tokens as plain text). */
async function countTokens(encoding: Encoding, text: string): Promise<number> {
  if (text === "") return 0;
  const breathe = turnEvery(10);
  let tokens = 0;
  for (const match of text.matchAll(new RegExp(encoding.pattern, "gu"))) {
    const piece = match[0];
    // An ASCII piece is its own UTF-8 bytes.
    const merging = merge(NON_ASCII.test(piece) ? Buffer.from(piece, "utf8").toString("latin1") : piece, encoding.ranks);
    for (let step = merging.next(); ; step = merging.next()) {
      if (step.done) {
        tokens += step.value;
        break;
      }
      await breathe();
    }
    await breathe();
  }
  return tokens;
}

/** A piece up to this many bytes merges in the shared arrays without pausing; a longer one pauses every PAUSE_EVERY steps. */
const SHARED_BYTES = 4_096;
const PAUSE_EVERY = 4_096;

interface MergeArrays {
  end: Int32Array;
  prev: Int32Array;
  pair: Float64Array;
  heap: number[];
}
const arrays = (n: number): MergeArrays => ({ end: new Int32Array(n), prev: new Int32Array(n), pair: new Float64Array(n), heap: [] });
// Shared by every piece that cannot pause (one at a time, so a short piece allocates nothing).
const shared = arrays(SHARED_BYTES);

/**
 * How many tokens byte-pair merging leaves of one piece (`bytes`: one character a byte): the
 * adjacent pair of lowest rank is merged first, the leftmost of equal ranks, until no pair is a
 * token. Pairs wait in a min-heap keyed rank × n + start, and a pair whose part changed since it
 * was pushed is skipped when it comes out (a rank names one byte sequence, so a changed pair
 * has another rank). Yields (a long piece only) where the caller may let the event loop run.
 */
function* merge(bytes: string, ranks: ReadonlyMap<string, number>): Generator<void, number> {
  const n = bytes.length;
  if (n < 2 || ranks.has(bytes)) return n === 0 ? 0 : 1;
  const long = n > SHARED_BYTES;
  // Parts by their start: `end` where each ends, `prev` the part before, `pair` the rank of it merged with the next (-1: none).
  const { end, prev, pair, heap } = long ? arrays(n) : shared;
  heap.length = 0;
  const rate = (start: number): void => {
    const next = end[start]!;
    const rank = next >= n ? -1 : (ranks.get(bytes.slice(start, end[next]!)) ?? -1);
    pair[start] = rank;
    if (rank >= 0) push(heap, rank * n + start);
  };
  for (let i = 0; i < n; i++) {
    end[i] = i + 1;
    prev[i] = i - 1;
  }
  for (let i = 0; i < n - 1; i++) {
    if (long && i % PAUSE_EVERY === PAUSE_EVERY - 1) yield;
    rate(i);
  }
  let parts = n;
  for (let steps = 1; heap.length > 0; steps++) {
    if (long && steps % PAUSE_EVERY === 0) yield;
    const key = pop(heap);
    const rank = Math.floor(key / n);
    const start = key - rank * n;
    if (pair[start] !== rank) continue;
    const next = end[start]!;
    end[start] = end[next]!;
    pair[next] = -1;
    if (end[start]! < n) prev[end[start]!] = start;
    parts--;
    rate(start);
    if (prev[start]! >= 0) rate(prev[start]!);
  }
  return parts;
}

function push(heap: number[], key: number): void {
  let i = heap.length;
  heap.push(key);
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (heap[parent]! <= key) break;
    heap[i] = heap[parent]!;
    i = parent;
  }
  heap[i] = key;
}

function pop(heap: number[]): number {
  const top = heap[0]!;
  const last = heap.pop()!;
  if (heap.length === 0) return top;
  let i = 0;
  for (;;) {
    const left = 2 * i + 1;
    if (left >= heap.length) break;
    const child = left + 1 < heap.length && heap[left + 1]! < heap[left]! ? left + 1 : left;
    if (heap[child]! >= last) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = last;
  return top;
}
