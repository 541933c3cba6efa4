import { type ChildProcess, spawn } from "node:child_process";

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
