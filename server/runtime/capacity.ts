import type { FlotillaConfig } from "@/lib/config";
import { getConfig } from "@/server/config/load";

/**
 * Process-wide execution capacity for sub-agents: a FIFO, promise-based semaphore.
 *
 * - A holder counts as running until it calls its release function (idempotent).
 * - A waiter is one queue node holding its promise callbacks. All waiters share ONE
 *   timer: the timeout is the same for every waiter and the queue is FIFO, so deadlines
 *   are already sorted and only the head's deadline needs a timer.
 * - release() hands the slot straight to the next waiter, so a slot is never "free"
 *   while someone waits (no barging, strict FIFO).
 * - Abort and timeout unlink the waiter in O(1); a waiter that was already granted
 *   is no longer in the queue, so abort and release cannot both act on it.
 */

export type AdmissionPolicy = "queue" | "reject";
export type Release = () => void;

export interface CapacityOptions {
  /** Slots that may be held at once (1..). */
  maxRunning: number;
  /** Waiters admitted while saturated (0 = none). Ignored by the reject policy. */
  maxQueued: number;
  policy: AdmissionPolicy;
  /** How long a waiter may wait for a slot. */
  queueTimeoutMs: number;
  /** Shown in error messages, e.g. "sub-agent capacity". */
  name?: string;
  /** The configuration fields to name in error messages (what an operator would raise). */
  hints?: { maxRunning?: string; maxQueued?: string; timeout?: string };
}

export interface AcquireOptions {
  signal?: AbortSignal;
  /**
   * Never wait: fail at once when saturated, whatever the policy. Used by nested
   * delegation, where the requester already holds a slot and waiting could deadlock.
   */
  noQueue?: boolean;
}

export interface CapacityStats {
  running: number;
  queued: number;
  maxRunning: number;
  maxQueued: number;
  policy: AdmissionPolicy;
}

/** Refused at once: saturated under the reject policy, queue full, or a no-queue request. */
export class CapacityRejectedError extends Error {
  readonly code = "capacity_rejected" as const;
  constructor(
    message: string,
    readonly reason: "saturated" | "queue_full" | "no_queue" | "pool_full",
  ) {
    super(message);
    this.name = "CapacityRejectedError";
  }
}

/** Waited the whole queue timeout without getting a slot. */
export class CapacityTimeoutError extends Error {
  readonly code = "capacity_timeout" as const;
  constructor(
    message: string,
    readonly waitedMs: number,
  ) {
    super(message);
    this.name = "CapacityTimeoutError";
  }
}

export function isCapacityError(err: unknown): err is CapacityRejectedError | CapacityTimeoutError {
  return err instanceof CapacityRejectedError || err instanceof CapacityTimeoutError;
}

interface Waiter {
  resolve: (release: Release) => void;
  reject: (err: unknown) => void;
  deadline: number;
  enqueuedAt: number;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  prev: Waiter | undefined;
  next: Waiter | undefined;
  /** Still linked in the queue (false once granted, aborted or timed out). */
  linked: boolean;
}

function formatSeconds(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  return ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms / 1000)}s`;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("This operation was aborted", "AbortError");
}

export class CapacityController {
  readonly maxRunning: number;
  readonly maxQueued: number;
  readonly policy: AdmissionPolicy;
  readonly queueTimeoutMs: number;
  private readonly name: string;
  private readonly hints: Required<NonNullable<CapacityOptions["hints"]>>;
  private running = 0;
  private queued = 0;
  private head: Waiter | undefined;
  private tail: Waiter | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: CapacityOptions) {
    if (!Number.isInteger(options.maxRunning) || options.maxRunning < 1)
      throw new RangeError(`maxRunning must be a positive integer (got ${options.maxRunning})`);
    if (!Number.isInteger(options.maxQueued) || options.maxQueued < 0)
      throw new RangeError(`maxQueued must be a non-negative integer (got ${options.maxQueued})`);
    if (!(options.queueTimeoutMs > 0)) throw new RangeError(`queueTimeoutMs must be positive (got ${options.queueTimeoutMs})`);
    this.maxRunning = options.maxRunning;
    this.maxQueued = options.maxQueued;
    this.policy = options.policy;
    this.queueTimeoutMs = options.queueTimeoutMs;
    this.name = options.name ?? "capacity";
    this.hints = {
      maxRunning: options.hints?.maxRunning ?? "maxRunning",
      maxQueued: options.hints?.maxQueued ?? "maxQueued",
      timeout: options.hints?.timeout ?? "queueTimeoutMs",
    };
  }

  stats(): CapacityStats {
    return {
      running: this.running,
      queued: this.queued,
      maxRunning: this.maxRunning,
      maxQueued: this.maxQueued,
      policy: this.policy,
    };
  }

  /**
   * Resolves with a release function once a slot is held. Rejects with
   * CapacityRejectedError (refused at once), CapacityTimeoutError (waited too long)
   * or the signal's abort reason. The caller must call release exactly when done
   * (extra calls are ignored); use `withSlot` to get that for free.
   */
  acquire(options: AcquireOptions = {}): Promise<Release> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(abortReason(signal));
    if (this.running < this.maxRunning) {
      this.running++;
      return Promise.resolve(this.makeRelease());
    }
    if (options.noQueue)
      return Promise.reject(
        new CapacityRejectedError(
          `${this.name} is full (${this.running} of ${this.maxRunning} running) and this request cannot wait ` +
            `because its caller already holds a slot (waiting could deadlock). Do the work directly, wait for ` +
            `running sub-agents to finish, or raise ${this.hints.maxRunning}.`,
          "no_queue",
        ),
      );
    if (this.policy === "reject")
      return Promise.reject(
        new CapacityRejectedError(
          `${this.name} is full (${this.running} of ${this.maxRunning} running) and the admission policy is ` +
            `"reject". Try again when a running sub-agent finishes, or raise ${this.hints.maxRunning}.`,
          "saturated",
        ),
      );
    if (this.queued >= this.maxQueued)
      return Promise.reject(
        new CapacityRejectedError(
          `${this.name} is full (${this.running} of ${this.maxRunning} running) and its wait queue is full ` +
            `(${this.queued} of ${this.maxQueued} waiting). Try again later, or raise ${this.hints.maxQueued}.`,
          "queue_full",
        ),
      );
    return new Promise<Release>((resolve, reject) => {
      const now = performance.now();
      const waiter: Waiter = {
        resolve,
        reject,
        deadline: now + this.queueTimeoutMs,
        enqueuedAt: now,
        signal,
        onAbort: undefined,
        prev: this.tail,
        next: undefined,
        linked: true,
      };
      if (this.tail) this.tail.next = waiter;
      else this.head = waiter;
      this.tail = waiter;
      this.queued++;
      if (signal) {
        waiter.onAbort = () => {
          if (!waiter.linked) return;
          this.unlink(waiter);
          reject(abortReason(signal));
        };
        signal.addEventListener("abort", waiter.onAbort, { once: true });
      }
      if (this.timer === undefined) this.armTimer(waiter.deadline, now);
    });
  }

  /**
   * Runs `fn` while holding a slot. If the signal aborts after the slot was granted but
   * before `fn` starts, the slot is released and the abort reason thrown. The slot is
   * released however `fn` ends (return, throw, reject).
   */
  async withSlot<T>(options: AcquireOptions, fn: () => Promise<T> | T): Promise<T> {
    const release = await this.acquire(options);
    try {
      if (options.signal?.aborted) throw abortReason(options.signal);
      return await fn();
    } finally {
      release();
    }
  }

  private makeRelease(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.handOff();
    };
  }

  /** A slot was released: give it to the oldest waiter, or free it. */
  private handOff(): void {
    const waiter = this.head;
    if (!waiter) {
      this.running--;
      return;
    }
    this.unlink(waiter);
    // running is unchanged: the slot moves from the releaser to the waiter.
    waiter.resolve(this.makeRelease());
  }

  private unlink(waiter: Waiter): void {
    waiter.linked = false;
    if (waiter.prev) waiter.prev.next = waiter.next;
    else this.head = waiter.next;
    if (waiter.next) waiter.next.prev = waiter.prev;
    else this.tail = waiter.prev;
    waiter.prev = waiter.next = undefined;
    this.queued--;
    if (waiter.signal && waiter.onAbort) waiter.signal.removeEventListener("abort", waiter.onAbort);
    if (this.queued === 0 && this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  private armTimer(deadline: number, now: number): void {
    this.timer = setTimeout(() => this.expire(), Math.max(0, Math.ceil(deadline - now)));
  }

  /** The shared timer fired: time out every waiter whose deadline passed, re-arm for the rest. */
  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    // setTimeout may fire up to ~1ms early relative to performance.now().
    while (this.head && this.head.deadline <= now + 1) {
      const waiter = this.head;
      this.unlink(waiter);
      const waited = now - waiter.enqueuedAt;
      waiter.reject(
        new CapacityTimeoutError(
          `Waited ${formatSeconds(waited)} for a slot in ${this.name} (${this.running} of ${this.maxRunning} ` +
            `running, ${this.queued} still waiting) and gave up. Try again later, or raise ${this.hints.timeout} ` +
            `or ${this.hints.maxRunning}.`,
          waited,
        ),
      );
    }
    if (this.head) this.armTimer(this.head.deadline, now);
  }
}

/** Builds the process controller's options from configuration. */
export function capacityOptionsFromConfig(config: FlotillaConfig): CapacityOptions {
  const rt = config.subagent_runtime;
  return {
    maxRunning: rt.max_running,
    maxQueued: rt.max_queued,
    policy: rt.admission_policy,
    queueTimeoutMs: rt.queue_timeout_seconds * 1000,
    name: "the process sub-agent capacity",
    hints: {
      maxRunning: "subagent_runtime.max_running",
      maxQueued: "subagent_runtime.max_queued",
      timeout: "subagent_runtime.queue_timeout_seconds",
    },
  };
}

// On globalThis so route handlers, instrumentation and hot-reloaded modules share one instance.
const globalForCapacity = globalThis as unknown as { __flotillaCapacity?: CapacityController };

/**
 * The one controller of this process, built from configuration on first use and fixed for
 * the life of the process (configuration is read once; there is no hot reload).
 * Ordinary tasks, swarm children and batch items all acquire from it.
 */
export function getProcessCapacity(): CapacityController {
  globalForCapacity.__flotillaCapacity ??= new CapacityController(capacityOptionsFromConfig(getConfig()));
  return globalForCapacity.__flotillaCapacity;
}
