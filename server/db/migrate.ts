import path from "node:path";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";

export const MIGRATIONS_FOLDER = path.resolve(process.cwd(), "drizzle");

/** Applies the committed drizzle migrations, serialized by an advisory lock so concurrent starters are safe. */
export async function migrateDatabase(url: string, migrationsFolder = MIGRATIONS_FOLDER): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql`select pg_advisory_lock(727274)`;
    await migrate(drizzle(sql), { migrationsFolder });
    await sql`select pg_advisory_unlock(727274)`;
  } finally {
    await sql.end({ timeout: 5 });
  }
}
