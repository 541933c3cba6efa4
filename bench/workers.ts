import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
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

/** The fields of /proc/PID/stat after the command name (field 3 of stat is index 0). */
function statFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

const ticksToMs = (ticks: number) => (ticks * 1000) / 100; // USER_HZ is 100 on Linux

/** CPU time (user + system) of a process so far, in ms: the kernel counters process.cpuUsage() reads, from /proc/PID/stat. */
export function processCpuMs(pid: number): number {
  const fields = statFields(pid);
  return ticksToMs(Number(fields[11]) + Number(fields[12])); // utime, stime (fields 14 and 15 of stat)
}

/**
 * CPU time (user + system, every thread) of a process and all its descendants so far, in ms: the
 * live ones' own counters, and what their exited children left in cutime and cstime.
 */
export function processTreeCpuMs(pid: number): number {
  const parentOf = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      parentOf.set(Number(entry), Number(statFields(Number(entry))[1]));
    } catch {
      // exited meanwhile
    }
  }
  const tree = new Set([pid]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const [child, parent] of parentOf)
      if (tree.has(parent) && !tree.has(child)) {
        tree.add(child);
        grew = true;
      }
  }
  let ticks = 0;
  for (const p of tree) {
    try {
      const f = statFields(p);
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]); // utime, stime, cutime, cstime
    } catch {
      // exited meanwhile: its time is in its parent's cutime once reaped
    }
  }
  return ticksToMs(ticks);
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
