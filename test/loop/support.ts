import { type ChildProcess, spawn } from "node:child_process";
import { sql } from "drizzle-orm";
import { afterAll } from "vitest";
import * as budget from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/budget/route";
import * as action from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/[action]/route";
import * as batch from "@/app/api/threads/[threadId]/subagent-batches/[batchId]/route";
import * as batches from "@/app/api/threads/[threadId]/subagent-batches/route";
import * as webhook from "@/app/api/webhook/route";
import type { BatchProjection } from "@/lib/api/batches";
import { buildRequest, type CallOptions, ORIGIN } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { sleep } from "../batches/support";

/**
 * The loop suites' harness: real worker processes (`server/worker/main.ts`) on the suite's
 * database, and the route handlers of this issue called with real Requests.
 */

type Handler = (req: Request, ctx: { params: Promise<Record<string, string>> }) => Promise<Response>;
const seg = "([^/]+)";
const base = `^/api/threads/${seg}/subagent-batches`;
const routes: { pattern: RegExp; names: string[]; methods: Record<string, Handler | undefined> }[] = [
  { pattern: new RegExp(`${base}$`), names: ["threadId"], methods: { GET: batches.GET as Handler, POST: batches.POST as Handler } },
  { pattern: new RegExp(`${base}/${seg}$`), names: ["threadId", "batchId"], methods: { GET: batch.GET as Handler } },
  { pattern: new RegExp(`${base}/${seg}/budget$`), names: ["threadId", "batchId"], methods: { POST: budget.POST as Handler } },
  {
    pattern: new RegExp(`${base}/${seg}/(pause|resume)$`),
    names: ["threadId", "batchId", "action"],
    methods: { POST: action.POST as Handler },
  },
  {
    pattern: /^\/api\/webhook$/,
    names: [],
    methods: { GET: webhook.GET as Handler, PUT: webhook.PUT as Handler, DELETE: webhook.DELETE as Handler },
  },
];

export async function call(method: string, path: string, options: CallOptions = {}): Promise<Response> {
  const url = new URL(path, ORIGIN);
  for (const route of routes) {
    const match = route.pattern.exec(url.pathname);
    if (!match) continue;
    const handler = route.methods[method];
    if (!handler) throw new Error(`no ${method} handler for ${url.pathname}`);
    const params = Object.fromEntries(route.names.map((name, i) => [name, decodeURIComponent(match[i + 1]!)]));
    return handler(buildRequest(method, url, options), { params: Promise.resolve(params) });
  }
  throw new Error(`no route for ${url.pathname}`);
}

export async function getProjection(token: string, threadId: string, batchId: string): Promise<BatchProjection> {
  const res = await call("GET", `/api/threads/${threadId}/subagent-batches/${batchId}`, { token });
  if (res.status !== 200) throw new Error(`GET batch: ${res.status} ${await res.text()}`);
  return (await res.json()) as BatchProjection;
}

/** Polls `probe` until it returns a value (not undefined), or fails with the last state. */
export async function waitUntil<T>(label: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${label}`);
    await sleep(everyMs);
  }
}

/** Construct at the top of a suite file (not inside a hook) so the cleanup registers for the file. */
export class Workers {
  private readonly children = new Set<ChildProcess>();
  private db?: TestDatabase;

  constructor() {
    const killAll = () => {
      for (const child of this.children) child.kill("SIGKILL");
    };
    afterAll(killAll);
    process.once("exit", killAll);
  }

  /** The suite's database, once created. */
  use(t: TestDatabase): this {
    this.db = t;
    return this;
  }

  private get t(): TestDatabase {
    if (!this.db) throw new Error("Workers.use(database) first");
    return this.db;
  }

  /** A worker process (`npm run worker`). */
  spawn(env: Record<string, string> = {}): ChildProcess {
    return this.spawnScript("server/worker/main.ts", [], env);
  }

  /** A web process's settlement runner (wake-ups and webhooks) as its own process. */
  spawnWebRunner(owner: string, env: Record<string, string> = {}): ChildProcess {
    return this.spawnScript("test/loop/fixtures/web-runner.ts", [owner], env);
  }

  spawnScript(script: string, args: string[], env: Record<string, string> = {}): ChildProcess {
    const inherited = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith("FLOTILLA__") && !k.startsWith("MODEL_")),
    );
    const child = spawn(process.execPath, ["--import", "tsx", script, ...args], {
      cwd: process.cwd(),
      env: {
        ...inherited,
        DATABASE_URL: this.t.url,
        LOG_LEVEL: "warn",
        NODE_ENV: "production",
        FLOTILLA__SUBAGENT_BATCHES__POLL_INTERVAL_SECONDS: "0.1",
        FLOTILLA__SIMULATOR__LATENCY_MS: "10",
        ...env,
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr?.on("data", (d) => {
      stderr = (stderr + String(d)).slice(-10_000);
    });
    child.on("exit", (code, signal) => {
      this.children.delete(child);
      if (code !== 0 && signal === null) console.error(`${script} exited with ${code}: ${stderr}`);
    });
    this.children.add(child);
    return child;
  }

  /** Booting tsx processes on a loaded machine can take most of a minute: wait generously. */
  async waitAlive(n: number, timeoutMs = 90_000): Promise<void> {
    await waitUntil(`${n} live workers`, async () => {
      const [row] = await this.t.db.execute<{ n: number }>(
        sql`select count(*)::int as n from worker_heartbeats where stopped_at is null and last_heartbeat_at > now() - interval '10 seconds'`,
      );
      return row!.n >= n ? true : undefined;
    }, timeoutMs);
  }

  /** SIGKILL every child (or the given ones): no clean stop, so heartbeat rows and leases stay as they were. */
  async killAll(only?: ChildProcess[]): Promise<void> {
    await Promise.all(
      (only ?? [...this.children]).map(
        (child) =>
          new Promise<void>((resolve) => {
            child.once("exit", () => resolve());
            child.kill("SIGKILL");
          }),
      ),
    );
  }

  async stopAll(): Promise<void> {
    await Promise.all(
      [...this.children].map(
        (child) =>
          new Promise<void>((resolve) => {
            child.once("exit", () => resolve());
            child.kill("SIGTERM");
          }),
      ),
    );
  }
}
