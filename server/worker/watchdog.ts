import { Worker } from "node:worker_threads";

/**
 * The worker's loop watchdog. A worker whose loop stops making progress must not go on looking
 * alive: its heartbeat is written by a timer, which keeps firing while a pass waits forever, and
 * nothing fires at all while the event loop is blocked. So the check runs in a thread of its own:
 * the loop stamps the time into shared memory each time a pass ends (`progress`), and the thread,
 * which needs nothing from the main thread, kills the process once the stamp is older than
 * `stallMs`. It writes its reason straight to stderr first. `npm start` (scripts/start.ts)
 * restarts a worker that exits and first returns the killed worker's items to the queue (a worker
 * run without it: its leases expire like any dead worker's).
 */
export interface Watchdog {
  /** The loop made progress now. */
  progress(): void;
  /** Milliseconds since the last progress. */
  idleMs(): number;
  stop(): Promise<void>;
}

const THREAD = `
const { workerData } = require("node:worker_threads");
const fs = require("node:fs");
const stamp = new BigInt64Array(workerData.buffer);
const { stallMs, checkMs, pid } = workerData;
setInterval(() => {
  const idle = Date.now() - Number(Atomics.load(stamp, 0));
  if (idle <= stallMs) return;
  fs.writeSync(2, "[flotilla] worker " + workerData.id + ": its loop made no progress for " + Math.round(idle / 1000) + " s (subagent_batches.worker_stall_seconds " + Math.round(stallMs / 1000) + " s); exiting for a restart\\n");
  process.kill(pid, "SIGKILL");
}, checkMs);
`;

export function startWatchdog(args: { id: string; stallMs: number }): Watchdog {
  const buffer = new SharedArrayBuffer(8);
  const stamp = new BigInt64Array(buffer);
  const progress = () => Atomics.store(stamp, 0, BigInt(Date.now()));
  progress();
  const checkMs = Math.max(100, Math.min(1_000, args.stallMs / 10));
  const thread = new Worker(THREAD, {
    eval: true,
    workerData: { buffer, stallMs: args.stallMs, checkMs, pid: process.pid, id: args.id },
    stdout: false,
    stderr: false,
  });
  // The watchdog never keeps the process alive by itself.
  thread.unref();
  return {
    progress,
    idleMs: () => Date.now() - Number(Atomics.load(stamp, 0)),
    stop: async () => {
      await thread.terminate();
    },
  };
}
