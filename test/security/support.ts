import { spawn } from "node:child_process";
import path from "node:path";

/** Runs the operator CLI (tsx scripts/cli.ts) as operators do, in a child process. */
export function cli(args: string[], env: Record<string, string | undefined>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const childEnv = { ...process.env, ...env } as NodeJS.ProcessEnv;
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
    const child = spawn(path.resolve("node_modules/.bin/tsx"), ["scripts/cli.ts", ...args], { env: childEnv });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}
