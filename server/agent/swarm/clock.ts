/** Time source of the swarm scheduler; tests inject a fake one (or fake the globals). */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Reads the globals at call time, so Vitest's fake timers drive it too. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Provider backpressure of one swarm call. Every timing is a parameter. */
export interface SwarmTimings {
  /** Items launched at once when the swarm begins. */
  initialBurst: number;
  /** After the initial burst, at most one launch per this interval. */
  admissionIntervalMs: number;
  /** A rate-limited item is requeued after base, 2×base, 4×base, ... */
  retryBaseDelayMs: number;
  /** Rate-limit retries per item before it fails for good. */
  maxRateLimitRetries: number;
  /** Effective capacity shrinks by one at most once per this interval. */
  shrinkIntervalMs: number;
  /** Quiet time (no rate limit) before one slot of capacity comes back. */
  recoveryQuietMs: number;
}

export const DEFAULT_SWARM_TIMINGS: SwarmTimings = {
  initialBurst: 5,
  admissionIntervalMs: 700,
  retryBaseDelayMs: 3_000,
  maxRateLimitRetries: 6,
  shrinkIntervalMs: 2_000,
  recoveryQuietMs: 180_000,
};
