/**
 * Runs an async task at most once at a time, however often it is asked for. A request while a
 * run is scheduled joins it; a request while a run is in flight schedules exactly one more run
 * after it (so nothing asked for is missed, and callers in the same tick share one run).
 * The worker uses one per kind of database round trip: the pass, renewal, the poll.
 */
export class Coalescer {
  private state: "idle" | "scheduled" | "running" = "idle";
  private again = false;
  private closed = false;
  private current: Promise<void> = Promise.resolve();

  constructor(
    private readonly task: () => Promise<void>,
    private readonly onError: (err: unknown) => void,
  ) {}

  request(): void {
    if (this.closed) return;
    if (this.state === "running") this.again = true;
    else if (this.state === "idle") {
      this.state = "scheduled";
      setImmediate(() => this.run());
    }
  }

  /** Resolves when no run is in flight (one requested meanwhile may follow). */
  settled(): Promise<void> {
    return this.current;
  }

  /** No further runs; resolves when the one in flight (if any) ends. */
  close(): Promise<void> {
    this.closed = true;
    return this.current;
  }

  private run(): void {
    if (this.closed) {
      this.state = "idle";
      return;
    }
    this.state = "running";
    this.current = this.task()
      .catch(this.onError)
      .finally(() => {
        this.state = "idle";
        if (this.again) {
          this.again = false;
          this.request();
        }
      });
  }
}
