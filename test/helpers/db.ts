import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { afterAll, inject } from "vitest";
import { createDatabase, type Database } from "@/server/db/client";
import { withDatabase } from "../setup/postgres";

export interface TestDatabase extends Database {
  url: string;
  name: string;
}

/**
 * A fresh, migrated database of this suite's own (cloned from the run's template);
 * dropped after the suite.
 */
export async function createTestDatabase(options: { max?: number } = {}): Promise<TestDatabase> {
  const adminUrl = inject("pgAdminUrl");
  const template = inject("pgTemplate");
  const name = `flotilla_t_${randomBytes(6).toString("hex")}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database "${name}" template "${template}"`);
  const url = withDatabase(adminUrl, name);
  const database = createDatabase(url, { max: options.max ?? 10, applicationName: "flotilla-test" });
  afterAll(async () => {
    await database.close();
    await admin.unsafe(`drop database if exists "${name}" with (force)`);
    await admin.end({ timeout: 5 });
  });
  return { ...database, url, name };
}
