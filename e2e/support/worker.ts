import { type ChildProcess, spawn } from "node:child_process";
import { e2eDatabaseUrl } from "./env";

/**
 * Real batch worker processes for browser tests (`node --import tsx server/worker/main.ts`) against the
 * e2e server's database, with short polls and leases so tests run in seconds.
 */

export interface WorkerHandle {
  pid: number;
  /** SIGTERM to the whole process group (npx → tsx → node), SIGKILL if it lingers. */
  stop(): Promise<void>;
  output(): string;
}

export const WORKER_ENV: Record<string, string> = {
  FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.2",
  FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "5",
  FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "16",
  FLOTILLA__SIMULATOR__LATENCY_MS: "50",
};

const running = new Set<WorkerHandle>();

function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

export async function startWorker(opts: { env?: Record<string, string>; readyTimeoutMs?: number } = {}) {
  const env: NodeJS.ProcessEnv = { ...process.env, ...WORKER_ENV, ...opts.env, DATABASE_URL: e2eDatabaseUrl() };
  // The worker must use the simulator whatever the developer's shell says.
  delete env.MODEL_BASE_URL;
  delete env.MODEL_API_KEY;
  delete env.MODEL_NAME;
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    cwd: process.cwd(),
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  child.stdout?.on("data", (d) => {
    log += d.toString();
  });
  child.stderr?.on("data", (d) => {
    log += d.toString();
  });
  const pid = child.pid!;
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-pid, signal);
    } catch {
      // already gone
    }
  };
  const handle: WorkerHandle = {
    pid,
    output: () => log,
    async stop() {
      running.delete(handle);
      const done = exited(child);
      signalGroup("SIGTERM");
      const timer = setTimeout(() => signalGroup("SIGKILL"), 15_000);
      await done;
      clearTimeout(timer);
    },
  };
  running.add(handle);

  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  while (!/worker \S+ started/.test(log)) {
    if (child.exitCode !== null) throw new Error(`worker exited with ${child.exitCode}:\n${log}`);
    if (Date.now() > deadline) {
      await handle.stop();
      throw new Error(`worker did not start in time:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return handle;
}

/** Stops every worker this process started (afterAll safety net). */
export async function stopAllWorkers(): Promise<void> {
  await Promise.all([...running].map((w) => w.stop()));
}
