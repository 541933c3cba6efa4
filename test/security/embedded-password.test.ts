import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EmbeddedServer, startEmbeddedPostgres } from "@/server/db/embedded";
import { LEGACY_EMBEDDED_PASSWORD, passwordFileFor, readEmbeddedPassword } from "@/server/db/embedded-credentials";
import { migrateDatabase } from "@/server/db/migrate";
import { cli } from "./support";
import { freePort } from "../helpers/free-port";

/**
 * The embedded PostgreSQL of `npm start`: a random superuser password generated once and kept
 * in the data folder (mode 600), and the CLI finding that database by FLOTILLA_DATA_DIR and
 * FLOTILLA_EMBEDDED_PORT without DATABASE_URL.
 */

// A port the OS says is free now: a pid-derived one could meet the run's own embedded cluster
// (test/setup/postgres.ts takes 54400 + pid % 500), which failed this suite once in CI.
let port: number;
let dataDir: string;
let pg: EmbeddedServer;

beforeAll(async () => {
  port = await freePort();
  dataDir = mkdtempSync(path.join(os.tmpdir(), "flotilla-embedded-pw-"));
  pg = await startEmbeddedPostgres({ dataDir: path.join(dataDir, "postgres"), port });
  const admin = postgres(pg.url(), { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database flotilla`);
  await admin.end();
  await migrateDatabase(pg.url("flotilla"));
}, 120_000);


afterAll(async () => {
  await pg?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe("embedded database password", () => {
  it("is random, stored under the data folder with mode 600, and the fixed one no longer works", async () => {
    const cluster = path.join(dataDir, "postgres");
    const password = readEmbeddedPassword(cluster);
    expect(password).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(password).not.toBe(LEGACY_EMBEDDED_PASSWORD);
    expect(statSync(passwordFileFor(cluster)).mode & 0o777).toBe(0o600);
    expect(pg.url()).toContain(password!);
    const legacy = postgres({ host: "127.0.0.1", port, user: "postgres", password: LEGACY_EMBEDDED_PASSWORD, database: "postgres", max: 1, connect_timeout: 5 });
    await expect(legacy`select 1`).rejects.toMatchObject({ code: "28P01" });
    await legacy.end();
  });

  it("the CLI reads it and honours FLOTILLA_EMBEDDED_PORT (no DATABASE_URL)", async () => {
    const env = { DATABASE_URL: undefined, FLOTILLA_DATA_DIR: dataDir, FLOTILLA_EMBEDDED_PORT: String(port) };
    const made = await cli(["user", "create", "--email", "embedded@example.com", "--password", "embedded password"], env);
    expect(made.stderr).toBe("");
    expect(made.code).toBe(0);
    expect(made.stdout).toMatch(/^created admin embedded@example\.com/);
    const invite = await cli(["invite", "create"], env);
    expect(invite.stdout).toMatch(/^inv_/);
  });
});
