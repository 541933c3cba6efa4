import { describe, expect, it } from "vitest";
import { loadConfig } from "@/server/config/load";
import { admit, createSubagentRuntime, KeyedLimiter, RootPools } from "@/server/runtime/admission";
import { CapacityRejectedError, type Release } from "@/server/runtime/capacity";

const tick = () => new Promise((r) => setImmediate(r));
const config = (env: Record<string, string> = {}) => loadConfig({ env, cwd: "/nonexistent" });

describe("per-thread lanes", () => {
  it("a thread at its max_per_thread waits in its own lane while other threads still get process slots", async () => {
    const rt = createSubagentRuntime(
      config({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4", FLOTILLA__SUBAGENTS__MAX_PER_THREAD: "2" }),
    );
    const busy: Release[] = [];
    for (let i = 0; i < 2; i++) busy.push(await admit(rt, { kind: "task", threadId: "A", parentRunId: `a${i}`, depth: 1 }));
    // Five more from thread A wait in A's lane, not in the process queue.
    const queuedA = Array.from({ length: 5 }, (_, i) =>
      admit(rt, { kind: "task", threadId: "A", parentRunId: `a-more${i}`, depth: 1 }),
    );
    await tick();
    expect(rt.threadLanes.stats("A")).toEqual({ running: 2, queued: 5 });
    expect(rt.capacity.stats()).toMatchObject({ running: 2, queued: 0 });
    // Thread B is not starved by A's backlog.
    const b1 = await admit(rt, { kind: "task", threadId: "B", parentRunId: "b", depth: 1 });
    const b2 = await admit(rt, { kind: "swarm_child", threadId: "B", parentRunId: "b2", depth: 1 });
    expect(rt.capacity.stats()).toMatchObject({ running: 4 });
    b1();
    b2();
    for (const r of busy) r();
    for (const p of queuedA) (await p)();
    expect(rt.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
    expect(rt.threadLanes.size).toBe(0);
  });

  it("drops idle lanes, including after an aborted waiter", async () => {
    const lanes = new KeyedLimiter({ maxRunning: 1, maxQueued: 10, policy: "queue", queueTimeoutMs: 10_000 });
    const r = await lanes.acquire("t");
    const ac = new AbortController();
    const w = lanes.acquire("t", { signal: ac.signal });
    ac.abort(new Error("stop"));
    await expect(w).rejects.toThrow("stop");
    r();
    r();
    expect(lanes.size).toBe(0);
  });

  it("batch items do not use thread lanes, only the process controller", async () => {
    const rt = createSubagentRuntime(config({ FLOTILLA__SUBAGENTS__MAX_PER_THREAD: "1" }));
    const a = await admit(rt, { kind: "batch_item", threadId: "T", depth: 1 });
    const b = await admit(rt, { kind: "batch_item", threadId: "T", depth: 1 });
    expect(rt.threadLanes.size).toBe(0);
    a();
    b();
  });
});

describe("per-response lane", () => {
  it("task children of one parent run never exceed effectiveTaskConcurrency, even with spare process slots", async () => {
    const rt = createSubagentRuntime(
      config({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "8", FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "2" }),
    );
    const a = await admit(rt, { kind: "task", threadId: "T", parentRunId: "lead", depth: 1 });
    const b = await admit(rt, { kind: "task", threadId: "T", parentRunId: "lead", depth: 1 });
    const c = admit(rt, { kind: "task", threadId: "T", parentRunId: "lead", depth: 1 });
    await tick();
    expect(rt.responseLanes.stats("lead")).toEqual({ running: 2, queued: 1 });
    expect(rt.capacity.stats().running).toBe(2);
    a();
    const rc = await c;
    expect(rt.capacity.stats().running).toBe(2);
    b();
    rc();
    expect(rt.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});

describe("root pools for nested delegation", () => {
  it("reject at once beyond max_active_per_root with an actionable message; other roots are unaffected", () => {
    const pools = new RootPools(2);
    const a = pools.reserve("root1");
    const b = pools.reserve("root1");
    let err: unknown;
    try {
      pools.reserve("root1");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CapacityRejectedError);
    expect((err as CapacityRejectedError).reason).toBe("pool_full");
    expect((err as Error).message).toMatch(/max_active_per_root = 2/);
    expect((err as Error).message).toMatch(/Do this part yourself/);
    const other = pools.reserve("root2");
    a();
    a();
    expect(pools.activeFor("root1")).toBe(1);
    const c = pools.reserve("root1");
    b();
    c();
    other();
    expect(pools.size).toBe(0);
  });

  it("admit uses the root pool only when max_depth > 1, and nested requests never queue", async () => {
    const flat = createSubagentRuntime(config({ FLOTILLA__SUBAGENTS__MAX_ACTIVE_PER_ROOT: "1" }));
    const f1 = await admit(flat, { kind: "task", threadId: "T", parentRunId: "p1", rootRunId: "R", depth: 1 });
    const f2 = await admit(flat, { kind: "task", threadId: "T", parentRunId: "p2", rootRunId: "R", depth: 1 });
    f1();
    f2();

    const nested = createSubagentRuntime(
      config({
        FLOTILLA__SUBAGENTS__MAX_DEPTH: "3",
        FLOTILLA__SUBAGENTS__MAX_ACTIVE_PER_ROOT: "2",
        FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2",
      }),
    );
    const parent1 = await admit(nested, { kind: "task", threadId: "T", parentRunId: "R", rootRunId: "R", depth: 1 });
    const parent2 = await admit(nested, { kind: "task", threadId: "T", parentRunId: "R", rootRunId: "R", depth: 1 });
    // Both process slots are held by parents; a child must not wait for them.
    const started = performance.now();
    await expect(
      admit(nested, { kind: "task", threadId: "T", parentRunId: "child-parent", rootRunId: "R", depth: 2 }),
    ).rejects.toBeInstanceOf(CapacityRejectedError);
    // Another root with free pool space is refused only by the (full) process capacity, also at once.
    await expect(
      admit(nested, { kind: "task", threadId: "U", parentRunId: "x", rootRunId: "R2", depth: 2 }),
    ).rejects.toMatchObject({ reason: "no_queue" });
    expect(performance.now() - started).toBeLessThan(200);
    // Nothing acquired by the refused requests is left behind.
    expect(nested.rootPools.activeFor("R")).toBe(2);
    expect(nested.rootPools.activeFor("R2")).toBe(0);
    expect(nested.capacity.stats()).toMatchObject({ running: 2, queued: 0 });
    parent1();
    parent2();
    expect(nested.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
    expect(nested.rootPools.size).toBe(0);
    expect(nested.threadLanes.size).toBe(0);
    expect(nested.responseLanes.size).toBe(0);
  });

  it("a refusal at the process step releases the lanes and pool already taken", async () => {
    const rt = createSubagentRuntime(
      config({
        FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "1",
        FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY: "reject",
        FLOTILLA__SUBAGENTS__MAX_DEPTH: "2",
      }),
    );
    const held = await admit(rt, { kind: "swarm_child", threadId: "T1", parentRunId: "p", rootRunId: "R1", depth: 1 });
    await expect(
      admit(rt, { kind: "task", threadId: "T2", parentRunId: "q", rootRunId: "R2", depth: 1 }),
    ).rejects.toMatchObject({ reason: "saturated" });
    expect(rt.threadLanes.stats("T2")).toEqual({ running: 0, queued: 0 });
    expect(rt.responseLanes.stats("q")).toEqual({ running: 0, queued: 0 });
    expect(rt.rootPools.activeFor("R2")).toBe(0);
    held();
    expect(rt.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });

  it("abort while waiting in a lane releases the pool reservation", async () => {
    const rt = createSubagentRuntime(
      config({ FLOTILLA__SUBAGENTS__MAX_DEPTH: "2", FLOTILLA__SUBAGENTS__MAX_PER_THREAD: "1" }),
    );
    const held = await admit(rt, { kind: "task", threadId: "T", parentRunId: "p1", rootRunId: "R", depth: 1 });
    const ac = new AbortController();
    const waiting = admit(rt, { kind: "task", threadId: "T", parentRunId: "p2", rootRunId: "R", depth: 1, signal: ac.signal });
    await tick();
    expect(rt.rootPools.activeFor("R")).toBe(2);
    ac.abort(new Error("stopped"));
    await expect(waiting).rejects.toThrow("stopped");
    expect(rt.rootPools.activeFor("R")).toBe(1);
    held();
    expect(rt.rootPools.size).toBe(0);
    expect(rt.capacity.stats()).toMatchObject({ running: 0, queued: 0 });
  });
});
