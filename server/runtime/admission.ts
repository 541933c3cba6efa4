import { effectiveTaskConcurrency, type FlotillaConfig } from "@/lib/config";
import { getConfig } from "@/server/config/load";
import {
  type AcquireOptions,
  CapacityController,
  type CapacityOptions,
  CapacityRejectedError,
  capacityOptionsFromConfig,
  getProcessCapacity,
  type Release,
} from "./capacity";

/**
 * Admission for one sub-agent run, in front of the process controller:
 *
 *   root pool (nested only, never waits) → response lane (task) → thread lane → process slot
 *
 * Each lane is a small FIFO controller per key, created on demand and dropped when idle,
 * so one busy thread waits in its own lane and never occupies another thread's budget or
 * the process queue beyond its own admitted runs.
 */

/** A controller per key (thread id, parent run id), created on demand and dropped when idle. */
export class KeyedLimiter {
  private readonly lanes = new Map<string, CapacityController>();

  constructor(private readonly options: CapacityOptions) {}

  async acquire(key: string, options: AcquireOptions = {}): Promise<Release> {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = new CapacityController(this.options);
      this.lanes.set(key, lane);
    }
    let release: Release;
    try {
      release = await lane.acquire(options);
    } catch (err) {
      this.dropIfIdle(key, lane);
      throw err;
    }
    return once(() => {
      release();
      this.dropIfIdle(key, lane);
    });
  }

  stats(key: string): { running: number; queued: number } {
    const lane = this.lanes.get(key);
    return lane ? { running: lane.stats().running, queued: lane.stats().queued } : { running: 0, queued: 0 };
  }

  /** Number of live lanes (tests check that idle lanes do not accumulate). */
  get size(): number {
    return this.lanes.size;
  }

  private dropIfIdle(key: string, lane: CapacityController): void {
    const s = lane.stats();
    if (s.running === 0 && s.queued === 0 && this.lanes.get(key) === lane) this.lanes.delete(key);
  }
}

/**
 * Shared pool of active descendants per root run, used when nesting is enabled. Full pools
 * reject at once: a nested requester already holds capacity, and waiting for a slot that
 * only its own ancestors can free would deadlock.
 */
export class RootPools {
  private readonly active = new Map<string, number>();

  constructor(readonly limit: number) {}

  reserve(rootRunId: string): Release {
    const n = this.active.get(rootRunId) ?? 0;
    if (n >= this.limit)
      throw new CapacityRejectedError(
        `This delegation tree already has ${n} active sub-agents, the limit per root run ` +
          `(subagents.max_active_per_root = ${this.limit}). Do this part yourself, or wait for running ` +
          "sub-agents to return and delegate again.",
        "pool_full",
      );
    this.active.set(rootRunId, n + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.active.get(rootRunId) ?? 1) - 1;
      if (left <= 0) this.active.delete(rootRunId);
      else this.active.set(rootRunId, left);
    };
  }

  activeFor(rootRunId: string): number {
    return this.active.get(rootRunId) ?? 0;
  }

  get size(): number {
    return this.active.size;
  }
}

/** The capacity boundary of one process: its config snapshot, controller, lanes and pools. */
export interface SubagentRuntime {
  config: FlotillaConfig;
  capacity: CapacityController;
  /** subagents.max_per_thread concurrently running children per thread. */
  threadLanes: KeyedLimiter;
  /** effectiveTaskConcurrency(config) concurrently running `task` children per parent run. */
  responseLanes: KeyedLimiter;
  /** subagents.max_active_per_root descendants per root run (only when max_depth > 1). */
  rootPools: RootPools;
}

export function createSubagentRuntime(config: FlotillaConfig, capacity?: CapacityController): SubagentRuntime {
  const base = capacityOptionsFromConfig(config);
  return {
    config,
    capacity: capacity ?? new CapacityController(base),
    threadLanes: new KeyedLimiter({
      ...base,
      maxRunning: config.subagents.max_per_thread,
      name: "this thread's sub-agent budget",
      hints: { ...base.hints, maxRunning: "subagents.max_per_thread" },
    }),
    responseLanes: new KeyedLimiter({
      ...base,
      maxRunning: effectiveTaskConcurrency(config),
      name: "this response's task concurrency",
      hints: { ...base.hints, maxRunning: "subagents.max_concurrent" },
    }),
    rootPools: new RootPools(config.subagents.max_active_per_root),
  };
}

const globalForRuntime = globalThis as unknown as { __flotillaSubagentRuntime?: SubagentRuntime };

/** The process runtime (its controller is getProcessCapacity()); fixed for the life of the process. */
export function getSubagentRuntime(): SubagentRuntime {
  globalForRuntime.__flotillaSubagentRuntime ??= createSubagentRuntime(getConfig(), getProcessCapacity());
  return globalForRuntime.__flotillaSubagentRuntime;
}

export interface AdmissionRequest {
  kind: "task" | "swarm_child" | "batch_item";
  threadId?: string;
  parentRunId?: string;
  rootRunId?: string;
  /** 1 for children of the lead (or batch items), 2+ for nested delegation. */
  depth: number;
  signal?: AbortSignal;
  /** Overrides the runtime's process controller (the executor's `capacity` option). */
  capacity?: CapacityController;
}

/**
 * Acquires everything a run needs before it may execute; resolves with one release for all
 * of it. Nested requests (depth > 1) never wait anywhere: their caller holds a slot.
 * On any refusal, whatever was already acquired is released before the error propagates.
 */
export async function admit(runtime: SubagentRuntime, req: AdmissionRequest): Promise<Release> {
  const releases: Release[] = [];
  const releaseAll = () => {
    for (let i = releases.length - 1; i >= 0; i--) releases[i]();
    releases.length = 0;
  };
  const opts: AcquireOptions = { signal: req.signal, noQueue: req.depth > 1 };
  try {
    if (runtime.config.subagents.max_depth > 1 && req.rootRunId && req.kind !== "batch_item")
      releases.push(runtime.rootPools.reserve(req.rootRunId));
    if (req.kind === "task" && req.parentRunId)
      releases.push(await runtime.responseLanes.acquire(req.parentRunId, opts));
    if (req.kind !== "batch_item" && req.threadId) releases.push(await runtime.threadLanes.acquire(req.threadId, opts));
    releases.push(await (req.capacity ?? runtime.capacity).acquire(opts));
  } catch (err) {
    releaseAll();
    throw err;
  }
  return once(releaseAll);
}

/** A release that does its work the first time it is called and nothing after. */
function once(release: () => void): Release {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    release();
  };
}
