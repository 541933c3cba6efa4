import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type { RE2JS } from "re2js";
import { compileCheckPattern, patternFlagBits, patternProgramBound } from "@/lib/check-pattern";

/**
 * Regex checks never hold the event loop. RE2 is linear in the text, but times the program: a
 * 26-instruction pattern took 115 ms on a 1 MB answer and a 463-instruction one 8 s, which on the
 * worker's event loop would stall every item, heartbeat and lease of the process. A match whose
 * text length times program bound is small (INLINE_WORK: tens of ms at worst) runs inline; any
 * other goes to one worker thread per process, one pattern at a time, each within
 * MATCH_TIME_LIMIT_MS; past it the thread is ended (a new one starts for the next match) and that
 * check fails. Both sides keep the last PATTERN_CACHE_SIZE compiled patterns; the thread's heap is
 * capped and it runs at a lower CPU priority than the event loop.
 */

export const MATCH_TIME_LIMIT_MS = 2_000;
/** Characters × program instructions matched inline: RE2 takes up to ~20 ns for each. */
const INLINE_WORK = 1_000_000;
const PATTERN_CACHE_SIZE = 32;
const THREAD_HEAP_MB = 192;

const inline = new Map<string, RE2JS>();

/** A pattern compiled once for inline matches (least recently used goes first). */
function inlinePattern(pattern: string, flags: string): RE2JS {
  const key = `${flags}/${pattern}`;
  let re = inline.get(key);
  if (re) inline.delete(key);
  else re = compileCheckPattern(pattern, flags);
  inline.set(key, re);
  if (inline.size > PATTERN_CACHE_SIZE) inline.delete(inline.keys().next().value as string);
  return re;
}

export class MatchTimeout extends Error {}

// Plain JavaScript: a worker thread does not get the TypeScript loader the process runs under.
const THREAD_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { RE2JS } = require(workerData.re2js);
// Matching is background work: on Linux this thread gets a lower CPU priority than the event loop.
try {
  const tid = Number(require("node:fs").readlinkSync("/proc/thread-self").split("/").pop());
  if (tid > 0) require("node:os").setPriority(tid, 10);
} catch {}
const cache = new Map();
// One subject, several patterns: one answer per pattern, in order.
parentPort.on("message", ({ subject, patterns }) => {
  for (const { pattern, bits } of patterns) {
    try {
      const key = bits + "/" + pattern;
      let re = cache.get(key);
      if (re) cache.delete(key);
      else re = RE2JS.compile(pattern, bits);
      cache.set(key, re);
      if (cache.size > workerData.cacheSize) cache.delete(cache.keys().next().value);
      parentPort.postMessage({ matched: re.test(subject) });
    } catch (err) {
      parentPort.postMessage({ error: err instanceof Error ? err.message : String(err) });
    }
  }
});
`;

interface Job {
  pattern: string;
  bits: number;
  subject: string;
  resolve: (matched: boolean) => void;
  reject: (err: Error) => void;
}

let thread: Worker | null = null;
const queue: Job[] = [];
/** The jobs sent to the thread together (one subject), how many it has answered, the current one's deadline. */
let running: { jobs: Job[]; answered: number; timer: NodeJS.Timeout } | null = null;

const deadline = (w: Worker) =>
  setTimeout(() => {
    stop(w);
    fail(new MatchTimeout(`did not finish within ${MATCH_TIME_LIMIT_MS / 1000} s`));
  }, MATCH_TIME_LIMIT_MS);

/** The thread's answer for the current job; the next one gets its own deadline. */
function answer(w: Worker, outcome: boolean | Error): void {
  const r = running;
  if (!r) return;
  clearTimeout(r.timer);
  const job = r.jobs[r.answered++]!;
  if (outcome instanceof Error) job.reject(outcome);
  else job.resolve(outcome);
  if (r.answered < r.jobs.length) r.timer = deadline(w);
  else {
    running = null;
    next();
  }
}

/** The current job fails (the thread is gone); the rest of its group goes back to the front of the queue. */
function fail(err: Error): void {
  const r = running;
  if (!r) return;
  running = null;
  clearTimeout(r.timer);
  r.jobs[r.answered]!.reject(err);
  queue.unshift(...r.jobs.slice(r.answered + 1));
  next();
}

function stop(w: Worker): void {
  if (thread === w) thread = null;
  void w.terminate();
}

function start(): Worker {
  const w = new Worker(THREAD_SOURCE, {
    eval: true,
    workerData: { re2js: createRequire(import.meta.url).resolve("re2js"), cacheSize: PATTERN_CACHE_SIZE },
    resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB },
  });
  // An idle thread does not keep the process alive; a match in flight does (its timer).
  w.unref();
  w.on("message", (m: { matched?: boolean; error?: string }) => {
    if (thread === w) answer(w, m.error === undefined ? m.matched === true : new Error(m.error));
  });
  w.on("error", (err) => {
    if (thread !== w) return;
    stop(w);
    fail(new Error(`the matching thread failed: ${err.message}`));
  });
  w.on("exit", () => {
    if (thread !== w) return;
    thread = null;
    fail(new Error("the matching thread exited"));
  });
  return w;
}

/**
 * Sends the next job with every queued job on the same subject (an item's checks): the subject
 * is copied to the thread once, not once a pattern (copies of 1 MB each made the main isolate
 * collect garbage for hundreds of ms).
 */
function next(): void {
  if (running) return;
  const first = queue.shift();
  if (!first) return;
  const jobs = [first];
  for (let i = 0; i < queue.length; )
    if (queue[i]!.subject === first.subject) jobs.push(...queue.splice(i, 1));
    else i++;
  thread ??= start();
  const w = thread;
  running = { jobs, answered: 0, timer: deadline(w) };
  w.postMessage({ subject: first.subject, patterns: jobs.map((j) => ({ pattern: j.pattern, bits: j.bits })) });
}

/**
 * Whether `pattern` (a regex check's, RE2 syntax, `flags` i/m/s) matches somewhere in `subject`.
 * Rejects with the reason when the pattern is refused (over the pattern budget, or RE2 syntax
 * it does not compile), with MatchTimeout past the time limit.
 */
export function matchPattern(pattern: string, flags: string, subject: string): Promise<boolean> {
  // Measured before anything compiles it (a spec may be older than the budget).
  let bound: number;
  try {
    bound = patternProgramBound(pattern);
  } catch (err) {
    return Promise.reject(err);
  }
  if (subject.length * bound <= INLINE_WORK) {
    try {
      return Promise.resolve(inlinePattern(pattern, flags).test(subject));
    } catch (err) {
      return Promise.reject(err);
    }
  }
  return new Promise((resolve, reject) => {
    queue.push({ pattern, bits: patternFlagBits(flags), subject, resolve, reject });
    next();
  });
}
