import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import type { Sql } from "postgres";

/**
 * Worker processes for benchmarks, started as `npm run worker` starts them, with the caller's
 * configuration only (the developer's FLOTILLA__ and MODEL_ variables are dropped).
 * BENCH_WORKER_NODE_ARGS adds node flags (`--cpu-prof --cpu-prof-dir=DIR` for a profile).
 */
export function spawnBenchWorkers(args: {
  databaseUrl: string;
  count: number;
  slots: number;
  entry?: string;
  env?: Record<string, string>;
}): ChildProcess[] {
  const nodeArgs = (process.env.BENCH_WORKER_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  return Array.from({ length: args.count }, () =>
    spawn(process.execPath, [...nodeArgs, "--import", "tsx", args.entry ?? "server/worker/main.ts"], {
      env: {
        ...base,
        DATABASE_URL: args.databaseUrl,
        LOG_LEVEL: "warn",
        NODE_ENV: "production",
        FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: String(args.slots),
        FLOTILLA__SUBAGENT_BATCHES__MAX_RUNNING_ITEMS_PER_BATCH: "64",
        ...args.env,
      },
      stdio: ["ignore", "ignore", "inherit"],
    }),
  );
}

/** SIGTERM every worker and wait until all have exited. */
export async function stopBenchWorkers(children: ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null) return resolve();
          c.once("exit", () => resolve());
          c.kill("SIGTERM");
        }),
    ),
  );
}

/** CPU time (user + system) of a process so far, in ms: the kernel counters process.cpuUsage() reads, from /proc/PID/stat. */
export function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of stat)
  return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
}

/** Until `count` workers have a live heartbeat (their startup done). */
export async function waitForWorkers(sql: Sql, count: number, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from worker_heartbeats where stopped_at is null`;
    if (row!.n >= count) return;
    if (Date.now() > deadline) throw new Error(`bench: only ${row!.n} of ${count} workers came up`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
