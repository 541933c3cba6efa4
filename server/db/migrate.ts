import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";

export const MIGRATIONS_FOLDER = path.resolve(process.cwd(), "drizzle");
/** The batch transitions, one function per file (server/batches/sql/README.md). */
export const FUNCTIONS_FOLDER = path.resolve(process.cwd(), "server", "batches", "sql");

/**
 * Applies the committed drizzle migrations (tables, indexes), then every function file as
 * `create or replace`, so each transition's current text is the one in its file. Serialized by
 * an advisory lock so concurrent starters are safe.
 */
export async function migrateDatabase(url: string, migrationsFolder = MIGRATIONS_FOLDER): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql`select pg_advisory_lock(727274)`;
    await migrate(drizzle(sql), { migrationsFolder });
    await applyFunctions(sql);
    await sql`select pg_advisory_unlock(727274)`;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function applyFunctions(sql: postgres.Sql): Promise<void> {
  const files = readdirSync(FUNCTIONS_FOLDER)
    .filter((f) => f.endsWith(".sql"))
    .sort();
  await sql.begin(async (tx) => {
    // Bodies refer to functions of other files; they are checked when first called instead.
    await tx.unsafe("set local check_function_bodies = off");
    for (const file of files) await tx.unsafe(readFileSync(path.join(FUNCTIONS_FOLDER, file), "utf8"));
  });
}
