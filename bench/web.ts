import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import path from "node:path";

/**
 * The web process of benchmarks, exactly as `npm start` runs it: `node --import tsx scripts/web.ts`
 * (the front door and Next's production server) with PORT and DATABASE_URL, on the production
 * build of this checkout (`npx next build` first; refused without one). Its own process group, so
 * stop() ends everything it started. The configuration comes from `env` alone (the developer's
 * FLOTILLA__ and MODEL_ variables are dropped).
 */

const root = process.cwd();

export interface Web {
  pid: number;
  base: string;
  stop(): Promise<void>;
}

export function benchEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")));
  return { ...base, NODE_ENV: "production", LOG_LEVEL: "warn", NEXTAUTH_SECRET: randomBytes(24).toString("base64url"), ...extra };
}

export async function startWeb(databaseUrl: string, opts: { env?: Record<string, string>; port: number }): Promise<Web> {
  if (!existsSync(path.join(root, ".next", "BUILD_ID")))
    throw new Error("bench: no production build in this checkout; run `npx next build` first (the web rows run it as `npm start` does)");
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/web.ts"], {
    env: benchEnv({ ...opts.env, DATABASE_URL: databaseUrl, PORT: String(opts.port) }),
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
    detached: true,
  });
  const base = `http://127.0.0.1:${opts.port}`;
  const web = { pid: child.pid!, base, stop: () => stopGroup(child) };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`bench: scripts/web.ts exited during startup (${child.exitCode})`);
    try {
      const res = await fetch(`${base}/api/health`);
      await res.arrayBuffer();
      if (res.status < 500) return web;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await web.stop();
      throw new Error("bench: scripts/web.ts did not answer within 120 s");
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** SIGTERM to the process group (web.ts's clean stop), SIGKILL after 10 s. */
export async function stopGroup(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  try {
    process.kill(-child.pid!, "SIGTERM");
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // already gone
    }
  }, 10_000);
  await exited;
  clearTimeout(timer);
}
