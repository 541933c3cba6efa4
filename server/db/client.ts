import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type { PostgresJsSession } from "drizzle-orm/postgres-js/session";
import postgres from "postgres";
import * as schema from "./schema";

export type Db = PostgresJsDatabase<typeof schema>;
/** A database handle or an open transaction; repository functions accept either. */
export type DbOrTx = Db | Parameters<Parameters<Db["transaction"]>[0]>[0];

/**
 * The postgres.js connection behind a handle, or the transaction's own connection: for what
 * drizzle has no form of (COPY streams). Statements sent here run inside the same transaction.
 */
export function driverOf(db: DbOrTx): postgres.Sql {
  return (db._.session as unknown as PostgresJsSession<postgres.Sql, typeof schema, never>).client;
}

export interface Database {
  db: Db;
  sql: postgres.Sql;
  close(): Promise<void>;
}

export function createDatabase(
  url: string,
  options: {
    max?: number;
    applicationName?: string;
    fetchTypes?: boolean;
    /** statement_timeout / lock_timeout of every connection of the pool, in ms (0 or absent: none). */
    statementTimeoutMs?: number;
    lockTimeoutMs?: number;
  } = {},
): Database {
  const sql = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    // postgres.js looks array types up (unawaited) on each new connection so JS arrays can be sent
    // as parameters; a connection closed mid-lookup becomes an unhandled rejection. Pools that
    // never send arrays and open connections on demand (exports) turn it off.
    fetch_types: options.fetchTypes ?? true,
    connection: {
      application_name: options.applicationName ?? "flotilla",
      ...(options.statementTimeoutMs ? { statement_timeout: Math.round(options.statementTimeoutMs) } : {}),
      ...(options.lockTimeoutMs ? { lock_timeout: Math.round(options.lockTimeoutMs) } : {}),
    },
  });
  const db = drizzle(sql, { schema });
  return { db, sql, close: () => sql.end({ timeout: 5 }) };
}

export function databaseUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  const url = env.DATABASE_URL;
  if (!url) throw new Error("DATABASE_URL is not set (npm start boots an embedded PostgreSQL and sets it)");
  return url;
}

const globalForDb = globalThis as unknown as { __flotillaDb?: Database };

/** The process-wide handle for the web process (survives dev hot reloads). */
export function getDatabase(): Database {
  globalForDb.__flotillaDb ??= createDatabase(databaseUrlFromEnv(), { applicationName: "flotilla-web" });
  return globalForDb.__flotillaDb;
}
