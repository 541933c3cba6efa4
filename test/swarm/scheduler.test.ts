import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  type AttemptOutcome,
  type AttemptRequest,
  runSchedule,
  type ScheduleResult,
  type SchedulerEvent,
} from "@/server/agent/swarm/scheduler";

/** One scripted attempt: settles after `ms` with the given status (honours abort). */
interface Step {
  ms: number;
  status?: AttemptOutcome["status"];
  failureClass?: string;
}
interface Outcome extends AttemptOutcome {
  item: string;
  attempt: number;
}

const rateLimited = (ms: number): Step => ({ ms, status: "failed", failureClass: "rate_limit" });
const ok = (ms: number): Step => ({ ms, status: "completed" });

interface Harness {
  result: Promise<ScheduleResult<Outcome>>;
  events: Array<SchedulerEvent & { at: number }>;
  starts: Array<{ item: string; attempt: number; at: number; retryOf: string | null }>;
  maxRunning: () => number;
  controller: AbortController;
}

function schedule(
  script: Record<string, Step[]>,
  opts: { concurrency: number; abortLatencyMs?: number; timings?: Record<string, number> },
): Harness {
  const names = Object.keys(script);
  const events: Harness["events"] = [];
  const starts: Harness["starts"] = [];
  const controller = new AbortController();
  let running = 0;
  let peak = 0;
  const runAttempt = (req: AttemptRequest<string>) =>
    new Promise<Outcome>((resolve) => {
      const steps = script[req.item];
      const step = steps[Math.min(req.attempt - 1, steps.length - 1)];
      running += 1;
      peak = Math.max(peak, running);
      starts.push({ item: req.item, attempt: req.attempt, at: Date.now(), retryOf: req.retryOfRunId });
      const runId = `${req.item}#${req.attempt}`;
      const done = (outcome: Outcome) => {
        running -= 1;
        resolve(outcome);
      };
      const timer = setTimeout(
        () => done({ item: req.item, attempt: req.attempt, runId, status: step.status ?? "completed", failureClass: step.failureClass }),
        step.ms,
      );
      req.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        // A child takes a moment to wind down after its signal fires.
        setTimeout(() => done({ item: req.item, attempt: req.attempt, runId, status: "cancelled" }), opts.abortLatencyMs ?? 0);
      });
    });
  const result = runSchedule<string, Outcome>({
    items: names,
    concurrency: opts.concurrency,
    signal: controller.signal,
    runAttempt,
    onAttemptError: (_e, req) => ({ item: req.item, attempt: req.attempt, status: "failed", failureClass: "unknown" }),
    onEvent: (e) => events.push({ ...e, at: Date.now() }),
    timings: opts.timings,
  });
  return { result, events, starts, maxRunning: () => peak, controller };
}

async function settle<T>(promise: Promise<T>, ms = 2_000_000): Promise<T> {
  let value: T | undefined;
  let done = false;
  promise.then((v) => {
    value = v;
    done = true;
  });
  await vi.advanceTimersByTimeAsync(ms);
  expect(done).toBe(true);
  return value as T;
}

const of = (events: Harness["events"], type: SchedulerEvent["type"]) => events.filter((e) => e.type === type);

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
  vi.setSystemTime(0);
});
afterEach(() => vi.useRealTimers());

describe("swarm scheduler: admission", () => {
  it("launches up to five at once, then one more every 700 ms", async () => {
    const script: Record<string, Step[]> = {};
    for (let i = 0; i < 9; i++) script[`i${i}`] = [ok(100)];
    const h = schedule(script, { concurrency: 5 });
    const r = await settle(h.result);
    expect(h.starts.map((s) => s.at)).toEqual([0, 0, 0, 0, 0, 700, 1400, 2100, 2800]);
    expect(r.settlements.every((s) => s.status === "completed")).toBe(true);
  });

  it("the burst is bounded by five even when the configured concurrency is higher", async () => {
    const script: Record<string, Step[]> = {};
    for (let i = 0; i < 8; i++) script[`i${i}`] = [ok(10_000)];
    const h = schedule(script, { concurrency: 8 });
    await settle(h.result);
    expect(h.starts.map((s) => s.at)).toEqual([0, 0, 0, 0, 0, 700, 1400, 2100]);
    expect(h.maxRunning()).toBe(8);
  });

  it("never runs more than the concurrency, and paces launches when several slots free at once", async () => {
    const script: Record<string, Step[]> = {};
    for (let i = 0; i < 5; i++) script[`i${i}`] = [ok(5_000)];
    const h = schedule(script, { concurrency: 3 });
    await settle(h.result);
    expect(h.starts.map((s) => s.at)).toEqual([0, 0, 0, 5_000, 5_700]);
    expect(h.maxRunning()).toBe(3);
  });
});

describe("swarm scheduler: results", () => {
  it("keeps input order whatever the finishing order", async () => {
    // Deterministic pseudo-random durations (LCG) so a failure is reproducible.
    let seed = 12345;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const script: Record<string, Step[]> = {};
    for (let i = 0; i < 32; i++) script[`item-${i + 1}`] = [{ ms: Math.floor(rand() * 20_000), status: rand() < 0.25 ? "failed" : "completed" }];
    const h = schedule(script, { concurrency: 5 });
    const r = await settle(h.result);
    const finishOrder = of(h.events, "item_settled").map((e) => (e as { index: number }).index);
    expect(finishOrder).not.toEqual([...finishOrder].sort((a, b) => a - b)); // they really finished out of order
    expect(r.settlements.map((s) => s.index)).toEqual([...Array(32).keys()]);
    expect(r.settlements.map((s) => s.outcome?.item)).toEqual(Object.keys(script));
    expect(r.settlements.map((s) => s.status)).toEqual(Object.values(script).map((s) => s[0].status));
  });
});

describe("swarm scheduler: provider backpressure", () => {
  it("requeues a rate-limited item after 3 s, 6 s, 12 s, ... and fails it once it is the only unfinished item", async () => {
    const h = schedule({ a: [rateLimited(10)], b: [ok(30_000)] }, { concurrency: 5 });
    const r = await settle(h.result);
    const suspended = of(h.events, "item_suspended") as Array<{ delayMs: number; attempt: number }>;
    expect(suspended.map((e) => e.delayMs)).toEqual([3_000, 6_000, 12_000, 24_000]);
    expect(suspended.map((e) => e.attempt)).toEqual([1, 2, 3, 4]);
    // Each retry starts exactly when its delay ends, as a fresh attempt linked to the previous one.
    const aStarts = h.starts.filter((s) => s.item === "a");
    expect(aStarts.map((s) => s.at)).toEqual([0, 3_010, 9_020, 21_030, 45_040]);
    expect(aStarts.map((s) => s.retryOf)).toEqual([null, "a#1", "a#2", "a#3", "a#4"]);
    // Every rate limit at least 2 s after the previous shrink costs one slot.
    const changes = of(h.events, "capacity_changed") as Array<{ effective: number; at: number }>;
    expect(changes.map((c) => `${c.effective}@${c.at}`)).toEqual(["4@10", "3@3020", "2@9030", "1@21040"]);
    // b finished at 30 s; a's next rate limit (45 050) finds it alone: it fails instead of waiting.
    expect(r.settlements[0]).toMatchObject({ status: "failed", reason: "rate_limit_alone", attempts: 5, settledAt: 45_050 });
    expect(r.settlements[1]).toMatchObject({ status: "completed", attempts: 1 });
  });

  it("fails a lone rate-limited item at once, without a retry", async () => {
    const h = schedule({ only: [rateLimited(50), ok(10)] }, { concurrency: 3 });
    const r = await settle(h.result);
    expect(of(h.events, "item_suspended")).toHaveLength(0);
    expect(h.starts).toHaveLength(1);
    expect(r.settlements[0]).toMatchObject({ status: "failed", reason: "rate_limit_alone", attempts: 1, settledAt: 50 });
  });

  it("bounds rate-limit retries per item", async () => {
    const h = schedule({ a: [rateLimited(10)], b: [ok(1_000_000)] }, { concurrency: 2, timings: { maxRateLimitRetries: 2 } });
    const r = await settle(h.result);
    expect(of(h.events, "item_suspended")).toHaveLength(2);
    expect(r.settlements[0]).toMatchObject({ status: "failed", reason: "rate_limit_exhausted", attempts: 3 });
  });

  it("requeues at the front: a due retry launches before items queued earlier", async () => {
    const h = schedule({ a: [rateLimited(10), ok(10)], b: [ok(5_000)], c: [ok(10)], d: [ok(10)] }, { concurrency: 1 });
    await settle(h.result);
    expect(h.starts.map((s) => `${s.item}@${s.at}`)).toEqual(["a@0", "b@700", "a@5700", "c@6400", "d@7100"]);
  });

  it("shrinks effective capacity by one at most once every 2 s, never below one, and enforces it", async () => {
    const h = schedule(
      {
        r0: [rateLimited(100), ok(10)],
        r1: [rateLimited(1_000), ok(10)],
        r2: [rateLimited(2_100), ok(10)],
        r3: [rateLimited(2_500), ok(10)],
        r4: [rateLimited(4_200), ok(10)],
        long: [ok(600_000)],
      },
      { concurrency: 5 },
    );
    await settle(h.result);
    const changes = of(h.events, "capacity_changed") as Array<{ direction: string; effective: number; at: number }>;
    expect(changes.map((c) => `${c.direction}:${c.effective}@${c.at}`)).toEqual([
      "down:4@100",
      "down:3@2100",
      "down:2@4200",
      // three quiet minutes after the last rate limit, then one slot per further three minutes
      "up:3@184200",
      "up:4@364200",
      "up:5@544200",
    ]);
  });

  it("shrinks to one and no further", async () => {
    const script: Record<string, Step[]> = { long: [ok(100_000)] };
    for (let i = 0; i < 4; i++) script[`r${i}`] = [rateLimited(10 + i * 2_000), ok(10)];
    const h = schedule(script, { concurrency: 2 });
    await settle(h.result);
    const changes = of(h.events, "capacity_changed") as Array<{ direction: string; effective: number }>;
    expect(changes.filter((c) => c.direction === "down").map((c) => c.effective)).toEqual([1]);
  });

  it("a shrunken capacity holds back launches until running children settle", async () => {
    const script: Record<string, Step[]> = { a: [rateLimited(50), ok(10)] };
    for (let i = 1; i < 6; i++) script[`i${i}`] = [ok(10_000)];
    const h = schedule(script, { concurrency: 3 });
    await settle(h.result);
    // a and i1,i2 start at 0; a's rate limit shrinks capacity 3 -> 2 while i1,i2 run, so
    // nothing launches until they settle at 10 s; then a (front) and i3 (paced by 700 ms).
    expect(h.starts.map((s) => `${s.item}@${s.at}`).slice(0, 5)).toEqual(["a@0", "i1@0", "i2@0", "a@10000", "i3@10700"]);
  });

  it("a new rate limit postpones recovery by another quiet period", async () => {
    const h = schedule(
      { r0: [rateLimited(0), ok(10)], r1: [rateLimited(100_000), ok(10)], long: [ok(500_000)] },
      { concurrency: 3 },
    );
    await settle(h.result);
    const changes = of(h.events, "capacity_changed") as Array<{ direction: string; effective: number; at: number }>;
    expect(changes.map((c) => `${c.direction}:${c.effective}@${c.at}`)).toEqual([
      "down:2@0",
      "down:1@100000",
      "up:2@280000",
      "up:3@460000",
    ]);
  });
});

describe("swarm scheduler: cancellation", () => {
  it("signals running items, never starts queued or suspended ones, and waits for active ones", async () => {
    const h = schedule(
      { r: [rateLimited(10), ok(10)], a: [ok(1_000)], b: [ok(1_000)], c: [ok(1_000)], d: [ok(1_000)] },
      { concurrency: 3, abortLatencyMs: 250 },
    );
    let resolvedAt = -1;
    h.result.then(() => {
      resolvedAt = Date.now();
    });
    await vi.advanceTimersByTimeAsync(500);
    h.controller.abort();
    const r = await settle(h.result);
    expect(resolvedAt).toBe(750); // joined the active children's 250 ms wind-down
    expect(h.starts.map((s) => s.item)).toEqual(["r", "a", "b"]); // nothing started after the abort
    expect(r.cancelled).toBe(true);
    expect(r.settlements.map((s) => `${s.status}:${s.reason}:${s.attempts}`)).toEqual([
      "cancelled:cancelled_while_suspended:1",
      "cancelled:cancelled_while_running:1",
      "cancelled:cancelled_while_running:1",
      "cancelled:cancelled_before_start:0",
      "cancelled:cancelled_before_start:0",
    ]);
  });

  it("an already-aborted signal starts nothing", async () => {
    const controller = new AbortController();
    controller.abort();
    let calls = 0;
    const r = await runSchedule<string, AttemptOutcome>({
      items: ["a", "b"],
      concurrency: 2,
      signal: controller.signal,
      runAttempt: async () => {
        calls += 1;
        return { status: "completed" };
      },
      onAttemptError: () => ({ status: "failed" }),
    });
    expect(calls).toBe(0);
    expect(r.settlements.map((s) => s.status)).toEqual(["cancelled", "cancelled"]);
  });

  it("a thrown attempt becomes a failed item without touching its siblings", async () => {
    const r = await runSchedule<string, AttemptOutcome>({
      items: ["a", "boom", "c"],
      concurrency: 3,
      signal: new AbortController().signal,
      runAttempt: async ({ item }) => {
        if (item === "boom") throw new Error("kaput");
        return { status: "completed", runId: item };
      },
      onAttemptError: () => ({ status: "failed", failureClass: "unknown" }),
    });
    expect(r.settlements.map((s) => s.status)).toEqual(["completed", "failed", "completed"]);
  });
});

describe("swarm scheduler: injected clock", () => {
  it("takes every timing from the injected clock, not the globals", async () => {
    vi.useRealTimers();
    // A manual clock: time moves only when the test says so.
    let now = 1_000_000;
    const timers: Array<{ at: number; fn: () => void; id: number }> = [];
    let nextId = 1;
    const clock = {
      now: () => now,
      setTimeout: (fn: () => void, ms: number) => {
        const id = nextId++;
        timers.push({ at: now + ms, fn, id });
        return id;
      },
      clearTimeout: (id: unknown) => {
        const i = timers.findIndex((t) => t.id === id);
        if (i >= 0) timers.splice(i, 1);
      },
    };
    const advance = async (ms: number) => {
      const target = now + ms;
      for (;;) {
        timers.sort((a, b) => a.at - b.at);
        const next = timers[0];
        if (!next || next.at > target) break;
        timers.shift();
        now = next.at;
        next.fn();
        await new Promise((r) => setImmediate(r));
      }
      now = target;
      await new Promise((r) => setImmediate(r));
    };
    const startedAt: number[] = [];
    const pending: Array<() => void> = [];
    const result = runSchedule<string, AttemptOutcome>({
      items: ["a", "b", "c", "d"],
      concurrency: 4,
      signal: new AbortController().signal,
      clock,
      timings: { initialBurst: 2, admissionIntervalMs: 5_000 },
      runAttempt: () =>
        new Promise((resolve) => {
          startedAt.push(now);
          pending.push(() => resolve({ status: "completed" }));
        }),
      onAttemptError: () => ({ status: "failed" }),
    });
    await advance(0);
    expect(startedAt).toEqual([1_000_000, 1_000_000]);
    await advance(4_999);
    expect(startedAt).toHaveLength(2);
    await advance(1);
    expect(startedAt).toEqual([1_000_000, 1_000_000, 1_005_000]);
    await advance(5_000);
    expect(startedAt).toEqual([1_000_000, 1_000_000, 1_005_000, 1_010_000]);
    for (const done of pending) done();
    const r = await result;
    expect(r.settlements.map((s) => s.status)).toEqual(["completed", "completed", "completed", "completed"]);
  });
});
