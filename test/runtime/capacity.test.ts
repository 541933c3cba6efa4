import { describe, expect, it } from "vitest";
import {
  CapacityController,
  type CapacityOptions,
  CapacityRejectedError,
  CapacityTimeoutError,
  type Release,
} from "@/server/runtime/capacity";

const make = (o: Partial<CapacityOptions> = {}) =>
  new CapacityController({ maxRunning: 1, maxQueued: 100, policy: "queue", queueTimeoutMs: 60_000, ...o });

const tick = () => new Promise((r) => setImmediate(r));

/** Settles to "pending" if the promise has not settled after a macrotask. */
async function state<T>(p: Promise<T>): Promise<"pending" | "fulfilled" | "rejected"> {
  let s: "pending" | "fulfilled" | "rejected" = "pending";
  p.then(
    () => {
      s = "fulfilled";
    },
    () => {
      s = "rejected";
    },
  );
  await tick();
  return s;
}

describe("CapacityController admission", () => {
  it("admits up to maxRunning at once and counts holders as running", async () => {
    const c = make({ maxRunning: 3 });
    const releases = await Promise.all([c.acquire(), c.acquire(), c.acquire()]);
    expect(c.stats()).toMatchObject({ running: 3, queued: 0 });
    const fourth = c.acquire();
    expect(await state(fourth)).toBe("pending");
    expect(c.stats()).toMatchObject({ running: 3, queued: 1 });
    releases[0]();
    const r4 = await fourth;
    expect(c.stats()).toMatchObject({ running: 3, queued: 0 });
    for (const r of [...releases.slice(1), r4]) r();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("queue policy grants waiters strictly in FIFO order", async () => {
    const c = make({ maxRunning: 2 });
    const held = [await c.acquire(), await c.acquire()];
    const order: number[] = [];
    const waiters = Array.from({ length: 20 }, (_, i) =>
      c.acquire().then((release) => {
        order.push(i);
        return release;
      }),
    );
    expect(c.stats().queued).toBe(20);
    held[0]();
    held[1]();
    // Each granted waiter releases in turn; grants must follow enqueue order.
    for (const w of waiters) (await w)();
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("a new acquire never overtakes a waiter when a slot is released (no barging)", async () => {
    const c = make();
    const r1 = await c.acquire();
    const first = c.acquire();
    r1();
    const late = c.acquire();
    expect(await state(first)).toBe("fulfilled");
    expect(await state(late)).toBe("pending");
    (await first)();
    (await late)();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("reject policy fails at once when saturated, naming the setting to raise", async () => {
    const c = make({ maxRunning: 2, policy: "reject", hints: { maxRunning: "subagent_runtime.max_running" } });
    const a = await c.acquire();
    const b = await c.acquire();
    const err = await c.acquire().catch((e) => e);
    expect(err).toBeInstanceOf(CapacityRejectedError);
    expect(err.reason).toBe("saturated");
    expect(err.message).toMatch(/2 of 2 running/);
    expect(err.message).toMatch(/subagent_runtime\.max_running/);
    expect(c.stats()).toMatchObject({ running: 2, queued: 0 });
    a();
    (await c.acquire())();
    b();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("queue policy rejects once max_queued waiters are waiting", async () => {
    const c = make({ maxRunning: 1, maxQueued: 2, hints: { maxQueued: "subagent_runtime.max_queued" } });
    const r = await c.acquire();
    const w1 = c.acquire();
    const w2 = c.acquire();
    const err = await c.acquire().catch((e) => e);
    expect(err).toBeInstanceOf(CapacityRejectedError);
    expect(err.reason).toBe("queue_full");
    expect(err.message).toMatch(/2 of 2 waiting/);
    expect(err.message).toMatch(/subagent_runtime\.max_queued/);
    expect(c.stats()).toMatchObject({ running: 1, queued: 2 });
    r();
    (await w1)();
    (await w2)();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("max_queued 0 with the queue policy behaves like reject when saturated", async () => {
    const c = make({ maxQueued: 0 });
    const r = await c.acquire();
    await expect(c.acquire()).rejects.toBeInstanceOf(CapacityRejectedError);
    r();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("noQueue requests fail at once instead of waiting, even under the queue policy", async () => {
    const c = make();
    const r = await c.acquire();
    const err = await c.acquire({ noQueue: true }).catch((e) => e);
    expect(err).toBeInstanceOf(CapacityRejectedError);
    expect(err.reason).toBe("no_queue");
    expect(err.message).toMatch(/deadlock/);
    r();
    (await c.acquire({ noQueue: true }))();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});

describe("CapacityController timeout", () => {
  it("times a waiter out with a clear error and removes it from the queue", async () => {
    const c = make({ queueTimeoutMs: 80, hints: { timeout: "subagent_runtime.queue_timeout_seconds" } });
    const r = await c.acquire();
    const started = performance.now();
    const err = await c.acquire().catch((e) => e);
    const waited = performance.now() - started;
    expect(err).toBeInstanceOf(CapacityTimeoutError);
    expect(err.message).toMatch(/subagent_runtime\.queue_timeout_seconds/);
    expect(waited).toBeGreaterThanOrEqual(75);
    expect(waited).toBeLessThan(1_000);
    expect(c.stats()).toMatchObject({ running: 1, queued: 0 });
    r();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("the shared timer expires each waiter at its own deadline, and granted waiters never time out", async () => {
    const c = make({ queueTimeoutMs: 150 });
    const r = await c.acquire();
    const t0 = performance.now();
    const a = c.acquire();
    await new Promise((res) => setTimeout(res, 60));
    const b = c.acquire();
    const c3 = c.acquire();
    // a is granted before its deadline; b and c3 time out ~60ms after a would have.
    r();
    const ra = await a;
    const times: number[] = [];
    await Promise.all(
      [b, c3].map((p) =>
        p.then(
          () => times.push(-1),
          (e) => {
            expect(e).toBeInstanceOf(CapacityTimeoutError);
            times.push(performance.now() - t0);
          },
        ),
      ),
    );
    expect(times.every((t) => t >= 200)).toBe(true);
    ra();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("a release that races the timeout hands the slot to a live waiter or frees it, never both", async () => {
    for (let round = 0; round < 20; round++) {
      const c = make({ queueTimeoutMs: 20 });
      const r = await c.acquire();
      const w = c.acquire();
      // Attach handlers now: the timeout may reject before the release below.
      const settled = w.then(
        (release) => ({ release }),
        (error) => ({ error }),
      );
      await new Promise((res) => setTimeout(res, 19 + (round % 3)));
      r();
      const outcome = await settled.then(
        (o) => {
          if ("release" in o) {
            o.release();
            return "granted";
          }
          return o.error instanceof CapacityTimeoutError ? "timeout" : "other";
        },
      );
      expect(["granted", "timeout"]).toContain(outcome);
      expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
    }
  });
});

describe("CapacityController abort and release races", () => {
  it("an already aborted signal is refused without taking a slot", async () => {
    const c = make({ maxRunning: 2 });
    const ac = new AbortController();
    ac.abort(new Error("gone"));
    await expect(c.acquire({ signal: ac.signal })).rejects.toThrow("gone");
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("abort while waiting removes only that waiter and rejects with the abort reason", async () => {
    const c = make();
    const r = await c.acquire();
    const ac = new AbortController();
    const order: string[] = [];
    const a = c.acquire().then((rel) => {
      order.push("a");
      return rel;
    });
    const b = c.acquire({ signal: ac.signal });
    const d = c.acquire().then((rel) => {
      order.push("d");
      return rel;
    });
    expect(c.stats().queued).toBe(3);
    const reason = new Error("user stopped");
    ac.abort(reason);
    await expect(b).rejects.toBe(reason);
    expect(c.stats()).toMatchObject({ running: 1, queued: 2 });
    r();
    (await a)();
    (await d)();
    expect(order).toEqual(["a", "d"]);
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("abort in the same tick right after a release granted the waiter: withSlot releases, nothing leaks", async () => {
    const c = make();
    const r = await c.acquire();
    const ac = new AbortController();
    let ran = false;
    const p = c.withSlot({ signal: ac.signal }, async () => {
      ran = true;
    });
    r(); // grants the waiter
    ac.abort(new Error("late abort")); // before the waiter's continuation runs
    await expect(p).rejects.toThrow("late abort");
    expect(ran).toBe(false);
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("abort in the same tick right before a release: the waiter is gone and the slot is freed", async () => {
    const c = make();
    const r = await c.acquire();
    const ac = new AbortController();
    const p = c.acquire({ signal: ac.signal });
    ac.abort(new Error("early abort"));
    r();
    await expect(p).rejects.toThrow("early abort");
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("randomized abort/release/timeout interleavings never exceed the limit or leak a slot", async () => {
    let seed = 42;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const c = make({ maxRunning: 3, maxQueued: 1000, queueTimeoutMs: 30 });
    let maxSeen = 0;
    let inside = 0;
    const jobs = Array.from({ length: 400 }, async () => {
      const ac = new AbortController();
      if (rand() < 0.3) setTimeout(() => ac.abort(new Error("abort")), Math.floor(rand() * 10));
      try {
        await c.withSlot({ signal: ac.signal }, async () => {
          inside++;
          maxSeen = Math.max(maxSeen, inside);
          expect(c.stats().running).toBeLessThanOrEqual(3);
          await new Promise((res) => setTimeout(res, Math.floor(rand() * 3)));
          inside--;
          if (rand() < 0.1) throw new Error("holder failed");
        });
      } catch {
        // aborted, timed out, rejected or holder failure: all fine here
      }
    });
    await Promise.all(jobs);
    expect(maxSeen).toBeLessThanOrEqual(3);
    expect(maxSeen).toBeGreaterThan(0);
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("a holder that throws still releases its slot (withSlot), and the next waiter runs", async () => {
    const c = make();
    const failing = c.withSlot({}, async () => {
      await tick();
      throw new Error("boom");
    });
    const next = c.withSlot({}, async () => "next ran");
    await expect(failing).rejects.toThrow("boom");
    await expect(next).resolves.toBe("next ran");
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("release is idempotent: calling it twice frees one slot, not two", async () => {
    const c = make({ maxRunning: 2 });
    const a = await c.acquire();
    const b = await c.acquire();
    const w = c.acquire();
    a();
    a();
    a();
    const rw = await w;
    expect(c.stats()).toMatchObject({ running: 2, queued: 0 });
    const extra = c.acquire();
    expect(await state(extra)).toBe("pending");
    b();
    const rx: Release = await extra;
    rw();
    rx();
    rx();
    expect(c.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("validates its own bounds", () => {
    expect(() => make({ maxRunning: 0 })).toThrow(RangeError);
    expect(() => make({ maxQueued: -1 })).toThrow(RangeError);
    expect(() => make({ queueTimeoutMs: 0 })).toThrow(RangeError);
  });
});
