import { spawn } from "node:child_process";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { describe, expect, inject, it } from "vitest";
import { effectiveTaskConcurrency } from "@/lib/config";
import { ConfigError, loadConfig } from "@/server/config/load";
import { createTestDatabase } from "./helpers/db";

describe("configuration", () => {
  it("applies the documented defaults", () => {
    const c = loadConfig({ env: {}, cwd: "/nonexistent" });
    expect(c.subagent_runtime).toEqual({ max_running: 3, max_queued: 64, admission_policy: "queue", queue_timeout_seconds: 300 });
    expect(c.subagent_batches.lease_seconds).toBe(120);
    expect(c.swarm.max_items).toBe(32);
    expect(c.chat).toEqual({ busy_policy: "enqueue", max_queued_messages: 20, max_system_turns: 10 });
  });

  it("lets FLOTILLA__SECTION__FIELD override, typed", () => {
    const c = loadConfig({
      env: { FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "16", FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY: "reject" },
      cwd: "/nonexistent",
    });
    expect(c.subagent_runtime.max_running).toBe(16);
    expect(c.subagent_runtime.admission_policy).toBe("reject");
  });

  it.each([
    ["FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING", "500", /subagent_runtime\.max_running: .*1\.\.64/],
    ["FLOTILLA__SUBAGENT_RUNTIME__MAX_QUEUED", "-1", /subagent_runtime\.max_queued: .*0\.\.10000/],
    ["FLOTILLA__SUBAGENTS__MAX_TOTAL_PER_RUN", "51", /subagents\.max_total_per_run: .*1\.\.50/],
    ["FLOTILLA__SUBAGENTS__MAX_DEPTH", "6", /subagents\.max_depth: .*1\.\.5/],
    ["FLOTILLA__SUBAGENT_RUNTIME__QUEUE_TIMEOUT_SECONDS", "0", /queue_timeout_seconds: .*1\.\.86400/],
    ["FLOTILLA__SUBAGENT_RUNTIME__ADMISSION_POLICY", "maybe", /admission_policy/],
    ["FLOTILLA__SUBAGENT_BATCHES__NOPE", "1", /subagent_batches/],
    ["FLOTILLA__CHAT__MAX_QUEUED_MESSAGES", "0", /chat\.max_queued_messages: .*1\.\.1000/],
    ["FLOTILLA__CHAT__MAX_QUEUED_MESSAGES", "1001", /chat\.max_queued_messages: .*1\.\.1000/],
    ["FLOTILLA__CHAT__MAX_SYSTEM_TURNS", "0", /chat\.max_system_turns: .*1\.\.100/],
    ["FLOTILLA__CHAT__MAX_SYSTEM_TURNS", "101", /chat\.max_system_turns: .*1\.\.100/],
  ])("refuses %s=%s naming the field and range", (key, value, message) => {
    expect(() => loadConfig({ env: { [key]: value }, cwd: "/nonexistent" })).toThrowError(ConfigError);
    expect(() => loadConfig({ env: { [key]: value }, cwd: "/nonexistent" })).toThrowError(message);
  });

  it("resolves one effective task concurrency", () => {
    const c = loadConfig({ env: { FLOTILLA__SUBAGENTS__MAX_CONCURRENT: "10" }, cwd: "/nonexistent" });
    expect(effectiveTaskConcurrency(c)).toBe(3);
    expect(effectiveTaskConcurrency(c, 2)).toBe(2);
  });
});

describe("test database", () => {
  it("is migrated and isolated per suite", async () => {
    const { db } = await createTestDatabase();
    const rows = await db.execute(sql`select count(*)::int as n from subagent_batches`);
    expect(rows[0]).toEqual({ n: 0 });
  });

  it("is dropped when its file ends, whether a hook or a test made it", async () => {
    // A vitest run of its own over test/fixtures/databases-probe.test.ts, on this run's server.
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ["node_modules/vitest/vitest.mjs", "run", "test/fixtures/databases-probe.test.ts"], {
        env: { ...process.env, FLOTILLA_DB_PROBE: "1", DATABASE_URL: inject("pgAdminUrl") },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let text = "";
      child.stdout.on("data", (d) => {
        text += String(d);
      });
      child.stderr.on("data", (d) => {
        text += String(d);
      });
      child.on("exit", (code) => (code === 0 ? resolve(text) : reject(new Error(`probe run exited ${code}: ${text}`))));
    });
    const names = [...out.matchAll(/probe-database (flotilla_t_\w+)/g)].map((m) => m[1]!);
    expect(names).toHaveLength(2);
    const admin = postgres(inject("pgAdminUrl"), { max: 1, onnotice: () => {} });
    try {
      const left = await admin<{ datname: string }[]>`select datname from pg_database where datname = any(${names})`;
      expect(left).toEqual([]);
    } finally {
      await admin.end({ timeout: 5 });
    }
  }, 120_000);
});
