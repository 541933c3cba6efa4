import pLimit from "p-limit";
import { CapacityController } from "@/server/runtime/capacity";
import type { BenchRow } from "./types";

/**
 * Cost of one acquire + release of the process capacity controller when 10,000 callers
 * contend for its slots, against a bare p-limit of the same size in the same process.
 * Each contender does the same trivial async work while holding the slot.
 */

export const name = "capacity";

const WAITERS = 10_000;
const SLOTS = 3; // the default subagent_runtime.max_running
const ROUNDS = 15;

const work = async () => {
  await Promise.resolve();
};

async function ours(withSignal: boolean): Promise<number> {
  const c = new CapacityController({ maxRunning: SLOTS, maxQueued: WAITERS, policy: "queue", queueTimeoutMs: 300_000 });
  // Real callers each own a signal (created before timing starts); listeners are part of the cost.
  const signals = withSignal ? Array.from({ length: WAITERS }, () => new AbortController().signal) : undefined;
  const t0 = performance.now();
  const all: Promise<void>[] = new Array(WAITERS);
  for (let i = 0; i < WAITERS; i++) all[i] = c.withSlot({ signal: signals?.[i] }, work);
  await Promise.all(all);
  const elapsed = performance.now() - t0;
  if (c.stats().running !== 0 || c.stats().queued !== 0) throw new Error("capacity leaked a slot");
  return (elapsed * 1e6) / WAITERS; // ns per slot
}

async function baseline(withSignal: boolean): Promise<number> {
  const limit = pLimit(SLOTS);
  const signals = withSignal ? Array.from({ length: WAITERS }, () => new AbortController().signal) : undefined;
  const t0 = performance.now();
  const all: Promise<void>[] = new Array(WAITERS);
  for (let i = 0; i < WAITERS; i++) {
    const signal = signals?.[i];
    if (!signal) {
      all[i] = limit(work);
      continue;
    }
    // What a p-limit caller must add to drop a waiter on abort: the same listener add/remove.
    const onAbort = () => {};
    signal.addEventListener("abort", onAbort, { once: true });
    all[i] = limit(() => {
      signal.removeEventListener("abort", onAbort);
      return work();
    });
  }
  await Promise.all(all);
  return ((performance.now() - t0) * 1e6) / WAITERS;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

export async function run(): Promise<BenchRow[]> {
  // Warm up both so the JIT has seen each path before measuring.
  for (let i = 0; i < 3; i++) {
    await ours(false);
    await ours(true);
    await baseline(false);
    await baseline(true);
  }
  const a: number[] = [];
  const s: number[] = [];
  const b: number[] = [];
  const bs: number[] = [];
  // Interleave rounds so machine noise affects all sides alike.
  for (let i = 0; i < ROUNDS; i++) {
    b.push(await baseline(false));
    a.push(await ours(false));
    bs.push(await baseline(true));
    s.push(await ours(true));
  }
  const base = median(b);
  const baseSignal = median(bs);
  return [
    {
      metric: `ns per acquire+release, ${WAITERS} waiters, ${SLOTS} slots (vs p-limit)`,
      ours: median(a),
      baseline: base,
      ratio: median(a) / base,
      target: 1.5,
    },
    {
      metric: "same, each waiter with its own AbortSignal (vs p-limit + the same abort listener)",
      ours: median(s),
      baseline: baseSignal,
      ratio: median(s) / baseSignal,
      target: 1.5,
    },
  ];
}
