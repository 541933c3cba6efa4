import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { loadConfig } from "@/server/config/load";
import { createTestDatabase, type TestDatabase } from "./helpers/db";
import { waitUntil } from "./loop/support";

/**
 * Tests and the processes they start use only the configuration they are given
 * (test/setup/config.ts): a checkout's flotilla.config.json, here the README's approvals recipe
 * with one worker slot, and the shell's FLOTILLA__* / MODEL_* variables change nothing.
 */

const HOSTILE = {
  lead: { tool_groups: ["workspace"] },
  tools: { require_approval: ["workspace/write_file", "clock"], approval_timeout_seconds: 86400 },
  subagent_runtime: { max_running: 1 },
};
const repo = process.cwd();
let checkout: string;
let t: TestDatabase;
let worker: ChildProcess | undefined;

beforeAll(async () => {
  checkout = mkdtempSync(path.join(os.tmpdir(), "flotilla-checkout-"));
  writeFileSync(path.join(checkout, "flotilla.config.json"), JSON.stringify(HOSTILE));
  t = await createTestDatabase();
});

afterAll(() => {
  worker?.kill("SIGKILL");
  rmSync(checkout, { recursive: true, force: true });
});

describe("the tests' configuration", () => {
  it("the loader reads no flotilla.config.json from the working directory", () => {
    process.chdir(checkout);
    try {
      const config = loadConfig();
      expect(config.tools.require_approval).toEqual([]);
      expect(config.lead.tool_groups).not.toContain("workspace");
      expect(config.subagent_runtime.max_running).toBe(3);
    } finally {
      process.chdir(repo);
    }
  });

  it("a worker started from a checkout holding a flotilla.config.json runs with the defaults it inherits", async () => {
    // Started as the suites start workers (this process's environment), in the checkout's folder.
    const tsx = pathToFileURL(path.join(repo, "node_modules/tsx/dist/loader.mjs")).href;
    let stderr = "";
    worker = spawn(process.execPath, ["--import", tsx, path.join(repo, "server/worker/main.ts")], {
      cwd: checkout,
      env: { ...process.env, DATABASE_URL: t.url, LOG_LEVEL: "warn", NODE_ENV: "production", TSX_TSCONFIG_PATH: path.join(repo, "tsconfig.json") },
      stdio: ["ignore", "ignore", "pipe"],
    });
    worker.stderr?.on("data", (d) => {
      stderr += String(d);
    });
    const capacity = await waitUntil(
      "the worker's heartbeat",
      async () => {
        if (worker?.exitCode !== null) throw new Error(`worker exited with ${worker?.exitCode}: ${stderr}`);
        const [row] = await t.db.execute<{ capacity: number }>(sql`select capacity from worker_heartbeats where stopped_at is null`);
        return row?.capacity;
      },
      90_000,
    );
    expect(capacity).toBe(3);
    await new Promise<void>((resolve) => {
      worker!.once("exit", () => resolve());
      worker!.kill("SIGTERM");
    });
  }, 120_000);

  it("drops the shell's FLOTILLA__* and MODEL_* variables before a suite runs", async () => {
    process.env.FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING = "1";
    process.env.MODEL_BASE_URL = "http://127.0.0.1:9/v1";
    process.env.FLOTILLA_CONFIG = path.join(checkout, "flotilla.config.json");
    vi.resetModules();
    await import("./setup/config");
    expect(process.env.FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING).toBeUndefined();
    expect(process.env.MODEL_BASE_URL).toBeUndefined();
    expect(loadConfig().subagent_runtime.max_running).toBe(3);
  });
});
