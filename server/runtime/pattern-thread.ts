import { AsyncLocalStorage } from "node:async_hooks";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type { ErrorObject } from "ajv";
import { patternFlagBits, patternProgramBound } from "@/lib/check-pattern";
import { PATTERN_CACHE_BYTES, PATTERN_INSTRUCTION_BYTES, PATTERN_MACHINE_BYTES, PATTERN_READ_MAX_CHARS, testPattern } from "./pattern-cache";

/**
 * User patterns and output schemas never hold the event loop. RE2 is linear in the text, but
 * times the program: a 26-instruction pattern took 115 ms on a 1 MB answer and a 463-instruction
 * one 8 s; and Ajv runs a schema's subschemas (and their patterns) once for every path that
 * reaches them. Either on the worker's event loop would stall every item, heartbeat and lease of
 * the process. Work that is small by its measure (a regex check: text length × program bound; a
 * typed answer: output-schema.ts) runs inline; any other goes to one worker thread per process,
 * one job at a time, each within MATCH_TIME_LIMIT_MS; past it the thread is ended (a new one
 * starts for the next job) and only that job fails. The thread keeps its compiled patterns in a
 * cache bounded by size as the process does (pattern-cache.ts), and an Ajv a draft that it
 * drops with its validators every SCHEMA_CACHE_SIZE schemas (Ajv keeps all it compiled); its
 * heap is capped and it runs at a lower CPU priority than the event loop. A job's time limit
 * starts when the thread has loaded and warmed up. The thread is shared by every user of the
 * process, so jobs wait in one queue per owner (matchingAs, around an item's run and checks) and
 * the thread takes the owners in turn: one user's many slow matches delay another's by one job.
 */

export const MATCH_TIME_LIMIT_MS = 2_000;
/**
 * A typed answer that timed out is checked once more under this limit before it fails for good:
 * a large legitimate answer on a loaded machine gets a second chance (output-schema.ts).
 */
export const VALIDATION_RETRY_LIMIT_MS = 4 * MATCH_TIME_LIMIT_MS;
/** Characters × program instructions matched inline: RE2 takes up to ~20 ns for each. */
const INLINE_WORK = 1_000_000;
const SCHEMA_CACHE_SIZE = 32;
const THREAD_HEAP_MB = 192;

/** The options every output schema's Ajv takes (output-schema.ts adds the pattern engine, as the thread does). */
export const AJV_OPTIONS = { strict: false, allErrors: true } as const;

export class MatchTimeout extends Error {}

// Plain JavaScript: a worker thread does not get the TypeScript loader the process runs under.
// The pattern cache mirrors pattern-cache.ts (same sizes, passed in workerData).
const THREAD_SOURCE = `
const { parentPort, workerData: w } = require("node:worker_threads");
const load = require("node:module").createRequire(w.base);
const { RE2JS } = load("re2js");
// Matching is background work: on Linux this thread gets a lower CPU priority than the event loop.
try {
  const tid = Number(require("node:fs").readlinkSync("/proc/thread-self").split("/").pop());
  if (tid > 0) require("node:os").setPriority(tid, 10);
} catch {}
const patterns = new Map();
let bytes = 0;
const sizeOf = (re) => {
  const r = re.re2Input, n = r.prog.numInst(), dfa = r.lazyDFA;
  return n * w.instructionBytes + (dfa ? dfa.stateBudget - dfa.memBudget : 0) + r.machinePool.length * n * w.machineBytes;
};
const trim = () => {
  for (const [key, e] of patterns) {
    if (bytes <= w.cacheBytes || patterns.size <= 1) return;
    patterns.delete(key);
    bytes -= e.bytes;
  }
};
const read = (s) => s.length <= w.readMax ? s : s.slice(0, /[\\uD800-\\uDBFF]/.test(s[w.readMax - 1]) ? w.readMax - 1 : w.readMax);
function test(pattern, bits, subject) {
  const key = bits + "/" + pattern;
  let e = patterns.get(key);
  if (e) patterns.delete(key);
  else {
    const re = RE2JS.compile(pattern, bits);
    e = { re, bytes: sizeOf(re) };
    bytes += e.bytes;
  }
  patterns.set(key, e);
  const matched = e.re.test(read(subject));
  const now = sizeOf(e.re);
  bytes += now - e.bytes;
  e.bytes = now;
  trim();
  return matched;
}
// Ajv's pattern engine: each pattern is its text; the compiled program stays in the cache above.
const engine = Object.assign((pattern) => ({ test: (s) => test(pattern, 0, s), toString: () => pattern }), { code: "flotilla-re2" });
const Ajv = { "07": load("ajv").default, "2019": load("ajv/dist/2019").default, "2020": load("ajv/dist/2020").default };
const addFormats = load("ajv-formats").default;
// One Ajv a draft, as the process has (it keeps all it compiled): after schemaCacheSize schemas
// the instances and their validators are dropped together.
let instances = new Map();
let compiled = 0;
const validators = new Map();
function instance(draft) {
  let a = instances.get(draft);
  if (!a) {
    a = new Ajv[draft]({ ...w.ajvOptions, code: { regExp: engine } });
    addFormats(a);
    instances.set(draft, a);
  }
  return a;
}
function validator(text) {
  let v = validators.get(text);
  if (v) {
    validators.delete(text);
    validators.set(text, v);
    return v;
  }
  if (compiled >= w.schemaCacheSize) {
    instances = new Map();
    validators.clear();
    compiled = 0;
  }
  const schema = JSON.parse(text);
  const declared = typeof schema.$schema === "string" ? schema.$schema : "";
  const a = instance(declared.includes("2020-12") ? "2020" : declared.includes("2019-09") ? "2019" : "07");
  try {
    v = a.compile(schema);
  } finally {
    a.removeSchema(schema);
  }
  compiled++;
  validators.set(text, v);
  return v;
}
function answer(job, subject) {
  if (job.pattern !== undefined) return test(job.pattern, job.bits, subject);
  const v = validator(job.schema);
  if (v(JSON.parse(job.json))) return { valid: true };
  return { valid: false, errors: v.errors.slice(0, job.maxErrors), count: v.errors.length };
}
// Loaded and warm (a first compile in a fresh isolate is slow): the first job may come; loading
// is not the job's time.
validator(JSON.stringify({ type: "object", properties: { a: { type: "string", format: "date" } } }));
let tid = 0;
try {
  tid = Number(require("node:fs").readlinkSync("/proc/thread-self").split("/").pop());
} catch {}
parentPort.postMessage({ ready: true, tid });
// One message, several jobs (an item's checks share their subject): one answer per job, in order.
parentPort.on("message", ({ subject, jobs }) => {
  for (const job of jobs) {
    try {
      parentPort.postMessage({ answer: answer(job, subject) });
    } catch (err) {
      parentPort.postMessage({ error: err instanceof Error ? err.message : String(err) });
    }
  }
});
`;

type ThreadJob = { pattern: string; bits: number } | { schema: string; json: string; maxErrors: number };

interface Job {
  job: ThreadJob;
  owner: string;
  /** The job's time limit (ms of the thread's CPU time). */
  limitMs: number;
  /** The text several match jobs share (sent once); none for a schema's. */
  subject?: string;
  resolve: (answer: unknown) => void;
  reject: (err: Error) => void;
}

let thread: Worker | null = null;
/** The thread has loaded its modules (a job's time limit starts when it is sent). */
let ready = false;
/** Waiting jobs by owner; owners are taken in turn (a Map keeps the order owners joined in). */
const queues = new Map<string, Job[]>();
/** Whose jobs the thread serves: runs and checks set it (matchingAs); none is one shared owner. */
const owners = new AsyncLocalStorage<string>();

/** Runs `fn` with its matching jobs queued as `owner`'s (a user id), taken in turn with other owners'. */
export function matchingAs<T>(owner: string, fn: () => T): T {
  return owners.run(owner, fn);
}

function queueOf(owner: string): Job[] {
  let q = queues.get(owner);
  if (!q) {
    q = [];
    queues.set(owner, q);
  }
  return q;
}

/** The owner the thread served last: another owner with jobs waiting goes first. */
let lastOwner: string | undefined;

/**
 * The next owner's first job with every job of that owner on the same subject: the owner waiting
 * longest, passing over the one just served while anyone else waits; it then goes to the back.
 */
function takeNext(): Job[] | undefined {
  let owner: string | undefined;
  for (const key of queues.keys())
    if (key !== lastOwner || owner === undefined) {
      owner = key;
      if (key !== lastOwner) break;
    }
  if (owner === undefined) return undefined;
  const q = queues.get(owner)!;
  queues.delete(owner);
  const first = q.shift()!;
  const jobs = [first];
  if (first.subject !== undefined)
    for (let i = 0; i < q.length; )
      if (q[i]!.subject === first.subject) jobs.push(...q.splice(i, 1));
      else i++;
  if (q.length > 0) queues.set(owner, q);
  lastOwner = owner;
  return jobs;
}
/** The jobs sent to the thread together (one subject), how many it has answered, the current one's deadline. */
let running: { jobs: Job[]; answered: number; timer: NodeJS.Timeout } | null = null;

/** The thread's Linux task id (its CPU time is read from /proc), or 0 where there is none. */
let threadTid = 0;
/** A job's limit is CPU time; its wall time at most this many times the limit (a loaded machine starves a background thread). */
export const WALL_FACTOR = 5;

/** The thread's CPU time so far (ms), or null where it cannot be read. */
function threadCpuMs(): number | null {
  if (!threadTid) return null;
  try {
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    const stat = readFileSync(`/proc/self/task/${threadTid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return null;
  }
}
const CLOCK_TICKS = 100;

/**
 * The current job's limit: `limitMs` of the thread's CPU time (wall time where that cannot be
 * read), and at most WALL_FACTOR times that of wall time.
 */
function deadline(w: Worker, limitMs: number): NodeJS.Timeout {
  const cpuAtStart = threadCpuMs();
  const sentAt = performance.now();
  const arm = (delay: number): NodeJS.Timeout =>
    setTimeout(() => {
      const cpu = threadCpuMs();
      const used = cpu === null || cpuAtStart === null ? performance.now() - sentAt : cpu - cpuAtStart;
      const wallLeft = limitMs * WALL_FACTOR - (performance.now() - sentAt);
      if (used < limitMs && wallLeft > 0 && running) {
        running.timer = arm(Math.max(50, Math.min(limitMs - used, wallLeft)));
        return;
      }
      stop(w);
      fail(new MatchTimeout(`did not finish within ${limitMs / 1000} s`));
    }, delay);
  return arm(limitMs);
}

/** The thread's answer for the current job; the next one gets its own deadline. */
function answer(w: Worker, outcome: { answer?: unknown; error?: string }): void {
  const r = running;
  if (!r) return;
  clearTimeout(r.timer);
  const job = r.jobs[r.answered++]!;
  if (outcome.error !== undefined) job.reject(new Error(outcome.error));
  else job.resolve(outcome.answer);
  if (r.answered < r.jobs.length) r.timer = deadline(w, r.jobs[r.answered]!.limitMs);
  else {
    running = null;
    next();
  }
}

/**
 * The current job fails (the thread is gone); the rest of its group goes back to the front of the
 * queue. A thread that died loading fails every queued job: the next would die the same way.
 */
function fail(err: Error): void {
  const r = running;
  if (!r) {
    for (const q of queues.values()) for (const job of q) job.reject(err);
    queues.clear();
    return;
  }
  running = null;
  clearTimeout(r.timer);
  r.jobs[r.answered]!.reject(err);
  const rest = r.jobs.slice(r.answered + 1);
  if (rest.length > 0) queueOf(rest[0]!.owner).unshift(...rest);
  next();
}

function stop(w: Worker): void {
  if (thread === w) gone();
  void w.terminate();
}

function gone(): void {
  thread = null;
  ready = false;
  threadTid = 0;
}

function start(): Worker {
  const w = new Worker(THREAD_SOURCE, {
    eval: true,
    workerData: {
      base: createRequire(import.meta.url).resolve("re2js"),
      cacheBytes: PATTERN_CACHE_BYTES,
      instructionBytes: PATTERN_INSTRUCTION_BYTES,
      machineBytes: PATTERN_MACHINE_BYTES,
      readMax: PATTERN_READ_MAX_CHARS,
      schemaCacheSize: SCHEMA_CACHE_SIZE,
      ajvOptions: AJV_OPTIONS,
    },
    resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB },
  });
  // An idle thread does not keep the process alive; a job in flight does (its timer).
  w.unref();
  w.on("message", (m: { answer?: unknown; error?: string; ready?: true; tid?: number }) => {
    if (thread !== w) return;
    if (!m.ready) return answer(w, m);
    ready = true;
    threadTid = m.tid ?? 0;
    next();
  });
  w.on("error", (err) => {
    if (thread !== w) return;
    stop(w);
    fail(new Error(`the matching thread failed: ${err.message}`));
  });
  w.on("exit", () => {
    if (thread !== w) return;
    gone();
    fail(new Error("the matching thread exited"));
  });
  return w;
}

/**
 * Sends the next job with every queued match job on the same subject (an item's checks): the
 * subject is copied to the thread once, not once a pattern (copies of 1 MB each made the main
 * isolate collect garbage for hundreds of ms).
 */
function next(): void {
  if (running || queues.size === 0) return;
  thread ??= start();
  if (!ready) return; // sent when the thread says it is ready
  const jobs = takeNext();
  if (!jobs) return;
  const first = jobs[0]!;
  const w = thread;
  running = { jobs, answered: 0, timer: deadline(w, first.limitMs) };
  w.postMessage({ subject: first.subject, jobs: jobs.map((j) => j.job) });
}

function enqueue(job: ThreadJob, subject?: string, limitMs = MATCH_TIME_LIMIT_MS): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const owner = owners.getStore() ?? "";
    queueOf(owner).push({ job, owner, limitMs, subject, resolve, reject });
    next();
  });
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
      return Promise.resolve(testPattern(pattern, flags, subject));
    } catch (err) {
      return Promise.reject(err);
    }
  }
  return enqueue({ pattern, bits: patternFlagBits(flags) }, subject) as Promise<boolean>;
}

export type ThreadValidation = { valid: true } | { valid: false; errors: ErrorObject[]; count: number };

/**
 * `json` (one JSON value's text) validated against the output schema whose JSON text is
 * `schema`, in the thread (its first `maxErrors` errors and how many there were). Rejects with
 * MatchTimeout past `limitMs` (compiling included), else with why it could not be checked.
 */
export function validateInThread(schema: string, json: string, maxErrors: number, limitMs = MATCH_TIME_LIMIT_MS): Promise<ThreadValidation> {
  return enqueue({ schema, json, maxErrors }, undefined, limitMs) as Promise<ThreadValidation>;
}
