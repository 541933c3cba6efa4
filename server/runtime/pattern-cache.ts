import type { RE2JS } from "re2js";
import { compileCheckPattern } from "@/lib/check-pattern";

/**
 * Every compiled user pattern of a process (or of its matching thread, which keeps its own with
 * the same sizes: server/runtime/pattern-thread.ts) lives in one cache bounded by an estimate of
 * its memory, not by a count: RE2's match cache (re2js's lazy DFA) grows up to 8 MB per pattern
 * as it matches, so 32 patterns could hold a quarter of a gigabyte. An entry's size is
 * re-measured after each match and the least recently used entries leave until the total is
 * within PATTERN_CACHE_BYTES; whoever needs an evicted pattern again compiles it again. Ajv's
 * validators hold only the pattern's text (output-schema.ts), never the compiled program.
 */

export const PATTERN_CACHE_BYTES = 32 * 1024 * 1024;
/** Per program instruction: the program, its one-pass form and the parse it came from (measured, rounded up). */
export const PATTERN_INSTRUCTION_BYTES = 512;
/** Per program instruction, per pooled matching machine (its thread queues). */
export const PATTERN_MACHINE_BYTES = 64;
/** How much of a string a pattern reads: the first 1 MiB characters, as a regex check does. */
export const PATTERN_READ_MAX_CHARS = 1_048_576;

/** re2js internals the estimate reads (stable across 2.x: `re2Input` is the RE2 the pattern compiled to). */
interface Re2Internals {
  prog: { numInst(): number };
  lazyDFA: { stateBudget: number; memBudget: number } | null;
  machinePool: unknown[];
}

/** What one compiled pattern holds now, estimated. */
export function patternBytes(re: RE2JS): number {
  const r = (re as unknown as { re2Input: Re2Internals }).re2Input;
  const n = r.prog.numInst();
  const dfa = r.lazyDFA ? r.lazyDFA.stateBudget - r.lazyDFA.memBudget : 0;
  return n * PATTERN_INSTRUCTION_BYTES + dfa + r.machinePool.length * n * PATTERN_MACHINE_BYTES;
}

/** The first PATTERN_READ_MAX_CHARS of `text` (never half a surrogate pair), and whether that cut it. */
export function readBound(text: string): { text: string; cut: boolean } {
  if (text.length <= PATTERN_READ_MAX_CHARS) return { text, cut: false };
  const end = /[\uD800-\uDBFF]/.test(text[PATTERN_READ_MAX_CHARS - 1] ?? "") ? PATTERN_READ_MAX_CHARS - 1 : PATTERN_READ_MAX_CHARS;
  return { text: text.slice(0, end), cut: true };
}

interface Entry {
  re: RE2JS;
  bytes: number;
}

const entries = new Map<string, Entry>();
let total = 0;

function trim(): void {
  for (const [key, entry] of entries) {
    if (total <= PATTERN_CACHE_BYTES || entries.size <= 1) return;
    entries.delete(key);
    total -= entry.bytes;
  }
}

function entry(pattern: string, flags: string): Entry {
  const key = `${flags}/${pattern}`;
  let found = entries.get(key);
  if (found) entries.delete(key);
  else {
    const re = compileCheckPattern(pattern, flags);
    found = { re, bytes: patternBytes(re) };
    total += found.bytes;
  }
  entries.set(key, found);
  trim();
  return found;
}

/** A pattern just compiled elsewhere (a submission's budget walk), kept for its first match. */
export function rememberPattern(pattern: string, flags: string, re: RE2JS): void {
  const key = `${flags}/${pattern}`;
  if (entries.has(key)) return;
  const bytes = patternBytes(re);
  entries.set(key, { re, bytes });
  total += bytes;
  trim();
}

/** Whether `pattern` matches somewhere in `subject` (its first PATTERN_READ_MAX_CHARS); the entry is measured again after. */
export function testPattern(pattern: string, flags: string, subject: string): boolean {
  const found = entry(pattern, flags);
  const matched = found.re.test(readBound(subject).text);
  const bytes = patternBytes(found.re);
  total += bytes - found.bytes;
  found.bytes = bytes;
  trim();
  return matched;
}

/** How many patterns the cache holds and their estimated size (tests, the bench). */
export function patternCacheStats(): { patterns: number; bytes: number } {
  return { patterns: entries.size, bytes: total };
}
