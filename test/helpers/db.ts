import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { inject } from "vitest";
import { createDatabase, type Database } from "@/server/db/client";
import { suiteDatabasePrefix, withDatabase } from "../setup/postgres";

export interface TestDatabase extends Database {
  url: string;
  name: string;
}

/** What this file's databases need at its end (test/setup/databases.ts drops them). */
const made: Array<() => Promise<void>> = [];

/**
 * A fresh, migrated database of this suite's own (cloned from the run's template); dropped when
 * the file ends, and by the run's teardown if the file never got there.
 */
export async function createTestDatabase(options: { max?: number } = {}): Promise<TestDatabase> {
  const adminUrl = inject("pgAdminUrl");
  const template = inject("pgTemplate");
  const name = `${suiteDatabasePrefix(template)}${randomBytes(6).toString("hex")}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${name}" template "${template}"`);
  const url = withDatabase(adminUrl, name);
  const database = createDatabase(url, { max: options.max ?? 10, applicationName: "flotilla-test" });
  made.push(async () => {
    await database.close().catch(() => {});
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 5 });
  });
  return { ...database, url, name };
}

/** Drops every database this file made. */
export async function dropTestDatabases(): Promise<void> {
  await Promise.all(made.splice(0).map((drop) => drop()));
}
