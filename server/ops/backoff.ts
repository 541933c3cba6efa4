/**
 * Back-off for a loop whose passes fail while a dependency (the database) is away: after each
 * consecutive failure the next pass waits base × 2^n, capped, with "equal jitter" (half fixed,
 * half random) so a fleet of workers does not reconnect in lockstep. One success resets it.
 */
export class OutageBackoff {
  private failures = 0;
  private until = 0;

  constructor(
    private readonly baseMs: number,
    private readonly maxMs = 10_000,
    private readonly random: () => number = Math.random,
  ) {}

  /** True while the loop should skip its pass. */
  holding(now = Date.now()): boolean {
    return now < this.until;
  }

  /** Records a failed pass; returns the delay before the next one. */
  failed(now = Date.now()): number {
    this.failures++;
    const cap = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(this.failures, 20));
    const delay = cap / 2 + this.random() * (cap / 2);
    this.until = now + delay;
    return delay;
  }

  succeeded(): void {
    this.failures = 0;
    this.until = 0;
  }

  get consecutiveFailures(): number {
    return this.failures;
  }
}
