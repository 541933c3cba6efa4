import { AbortReason } from "@/server/errors";
import { type AdmissionRequest, admit, type SubagentRuntime } from "@/server/runtime/admission";
import type { Release } from "@/server/runtime/capacity";

/** Abort reason when the definition's time limit passes. */
const timedOut = (timeoutMs: number) =>
  new AbortReason("timeout", `the sub-agent did not finish within its time limit of ${Math.round(timeoutMs / 1000)}s`);

/**
 * The admission stage: the run's capacity slot (its lanes and pools: runtime/admission.ts) and
 * its clock, the definition's time limit, which counts the run's own work and not a person's
 * decision. While a chat child's call waits for a person the clock stops and a direct child
 * gives its slot back; nested runs (depth > 1) keep theirs: they may not queue for one again
 * (their ancestors hold slots).
 */
export class RunAdmission {
  private release: Release | undefined;
  private readmitting: Promise<void> | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timeLeft: number;
  private clockStarted = 0;

  constructor(
    private readonly runtime: SubagentRuntime,
    private readonly request: AdmissionRequest,
    private readonly timeoutMs: number,
    private readonly controller: AbortController,
  ) {
    this.timeLeft = timeoutMs;
  }

  /** Takes the slot (queueing as the runtime says); throws the capacity errors. */
  async admit(): Promise<void> {
    this.release = await admit(this.runtime, this.request);
  }

  startClock(): void {
    this.clockStarted = performance.now();
    this.timer = setTimeout(() => this.controller.abort(timedOut(this.timeoutMs)), Math.max(0, this.timeLeft));
  }

  /** A person decides: the clock stops and a direct child's slot goes back. */
  pauseForPerson(): void {
    clearTimeout(this.timer);
    this.timeLeft -= performance.now() - this.clockStarted;
    if (this.request.depth === 1) {
      this.release?.();
      this.release = undefined;
    }
  }

  /** Before an approved call runs: the slot again, queueing like any run (once for concurrent calls). */
  async readmit(): Promise<void> {
    if (this.release) return;
    this.readmitting ??= admit(this.runtime, this.request).then(
      (r) => {
        this.release = r;
        this.readmitting = undefined;
      },
      (err) => {
        this.readmitting = undefined;
        throw err;
      },
    );
    await this.readmitting;
  }

  /** The run is over: no clock, no slot. */
  end(): void {
    clearTimeout(this.timer);
    this.release?.();
    this.release = undefined;
  }
}
