import { batchSubagent } from "@/server/agent/registry";
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { sql } from "drizzle-orm";
import { loadConfig } from "@/server/config/load";
import type { Db } from "@/server/db/client";
import { createUser } from "@/server/auth/users";
import { submitBatch } from "@/server/batches/submit";
import { createThread } from "@/server/chat/threads";

/**
 * Real worker processes (`node --import tsx server/worker/main.ts`) for the ops suites, plus a user, a
 * thread and batch submission through the real repository. Only the model provider is faked.
 */

export interface WorkerProcess {
  pid: number;
  output(): string;
  /** False once the process exited (crashed or stopped). */
  running(): boolean;
  /** SIGTERM to the process group (npx → tsx → node), SIGKILL if it lingers. */
  stop(): Promise<void>;
}

const started = new Set<WorkerProcess>();

export const FAST_WORKER_ENV: Record<string, string> = {
  FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
  FLOTILLA__SUBAGENT_BATCHES__LEASE_SECONDS: "5",
  FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "8",
  FLOTILLA__SIMULATOR__LATENCY_MS: "20",
  LOG_LEVEL: "info",
};

export async function startWorkerProcess(opts: {
  databaseUrl: string;
  env?: Record<string, string>;
  readyTimeoutMs?: number;
}): Promise<WorkerProcess> {
  const env: Record<string, string | undefined> = { ...process.env, ...FAST_WORKER_ENV, ...opts.env, DATABASE_URL: opts.databaseUrl };
  delete env.VITEST; // the child is a real process, not a test: keep its logs and behaviour production-like
  delete env.NODE_ENV;
  for (const key of ["MODEL_BASE_URL", "MODEL_API_KEY", "MODEL_NAME"]) if (!opts.env?.[key]) delete env[key];
  const child = spawn(process.execPath, ["--import", "tsx", "server/worker/main.ts"], {
    cwd: process.cwd(),
    env: env as NodeJS.ProcessEnv,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout?.on("data", (d) => {
    out += d.toString();
  });
  child.stderr?.on("data", (d) => {
    out += d.toString();
  });
  const pid = child.pid as number;
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-pid, s);
    } catch {
      // already gone
    }
  };
  const exited = (c: ChildProcess) =>
    c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once("exit", () => r()));
  const handle: WorkerProcess = {
    pid,
    output: () => out,
    running: () => child.exitCode === null && child.signalCode === null,
    async stop() {
      started.delete(handle);
      const done = exited(child);
      signal("SIGTERM");
      const timer = setTimeout(() => signal("SIGKILL"), 15_000);
      await done;
      clearTimeout(timer);
    },
  };
  started.add(handle);
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  while (!/worker \S+ started/.test(out)) {
    if (child.exitCode !== null) throw new Error(`worker exited with ${child.exitCode}:\n${out}`);
    if (Date.now() > deadline) {
      await handle.stop();
      throw new Error(`worker did not start in time:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return handle;
}

/** The first port of `candidates` nothing listens on (so suites do not collide with other servers). */
export async function freePort(candidates: number[]): Promise<number> {
  const net = await import("node:net");
  for (const port of candidates) {
    const free = await new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once("error", () => resolve(false));
      srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free port among ${candidates.join(", ")}`);
}

export async function stopAllWorkerProcesses(): Promise<void> {
  await Promise.all([...started].map((w) => w.stop()));
}

export async function seedOwner(db: Db): Promise<{ userId: string; threadId: string }> {
  const user = await createUser(db, { email: `ops-${randomBytes(4).toString("hex")}@example.com`, password: "password-123" });
  const thread = await createThread(db, { userId: user.id, title: "ops" });
  return { userId: user.id, threadId: thread.id };
}

export async function submit(
  db: Db,
  owner: { userId: string; threadId: string },
  prompts: string[],
  opts: { maxRunning?: number; maxLive?: number; env?: Record<string, string>; simulator?: boolean; modelName?: string } = {},
) {
  const config = loadConfig({ env: opts.env ?? {}, cwd: "/nonexistent" });
  const { batch } = await submitBatch(db, { ...batchSubagent(config, undefined),
    userId: owner.userId,
    threadId: owner.threadId,
    config,
    model: { name: opts.modelName ?? "simulator", simulator: opts.simulator ?? true },
    input: {
      submission_key: `ops-${randomBytes(6).toString("hex")}`,
      items: prompts.map((prompt, i) => ({ item_key: `k${i + 1}`, prompt })),
      max_running_items: opts.maxRunning,
      max_live_items: opts.maxLive,
    },
  });
  return batch;
}

export interface BatchCounts {
  status: string;
  total: number;
  pending: number;
  queued: number;
  leased: number;
  running: number;
  succeeded: number;
  failed: number;
  cancelled: number;
}

export async function batchCounts(db: Db, batchId: string): Promise<BatchCounts> {
  const [row] = (await db.execute(sql`
    select status, total, pending_count as pending, queued_count as queued, leased_count as leased,
           running_count as running, succeeded_count as succeeded, failed_count as failed, cancelled_count as cancelled
    from subagent_batches where id = ${batchId}`)) as unknown as BatchCounts[];
  if (!row) throw new Error(`batch ${batchId} not found`);
  return row;
}

/** Polls until the batch is finished (completed/failed/cancelled); tolerates a database that is down. */
export async function waitForBatch(db: Db, batchId: string, timeoutMs: number): Promise<BatchCounts> {
  const deadline = Date.now() + timeoutMs;
  let last: BatchCounts | undefined;
  for (;;) {
    try {
      last = await batchCounts(db, batchId);
      if (["completed", "failed", "cancelled"].includes(last.status)) return last;
    } catch {
      // database restarting: keep polling
    }
    if (Date.now() > deadline) throw new Error(`batch ${batchId} did not finish: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
