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

/** Statements with more parameters than this stay unprepared: a bulk insert's shape is rarely sent twice. */
const PREPARED_MAX_PARAMETERS = 100;

/**
 * The client drizzle is given: its statements prepared (per connection, by postgres.js) when
 * they have at most PREPARED_MAX_PARAMETERS parameters. Drizzle sends every query unprepared,
 * and postgres.js sends an unprepared query with parameters as a Describe, waits for its answer,
 * then binds and executes it: two round trips a statement, and nothing pipelined behind it on
 * a transaction's connection. A prepared one is one round trip (after its first use on that
 * connection), and statements sent together go out together.
 */
function preparing(sql: postgres.Sql): postgres.Sql {
  return new Proxy(sql, {
    get(target, key, receiver) {
      if (key === "unsafe")
        return (query: string, args: unknown[] = [], options: { prepare?: boolean } = {}) =>
          target.unsafe(query, args as postgres.ParameterOrJSON<never>[], {
            ...options,
            prepare: options.prepare || (args.length > 0 && args.length <= PREPARED_MAX_PARAMETERS),
          });
      if (key === "begin" || key === "savepoint")
        return (...args: unknown[]) => {
          const fn = args.pop() as (scoped: postgres.Sql) => unknown;
          const scope = Reflect.get(target, key) as (...a: unknown[]) => unknown;
          return scope(...args, (scoped: postgres.Sql) => fn(preparing(scoped)));
        };
      return Reflect.get(target, key, receiver);
    },
  });
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
    /** Prepares the statements drizzle sends (preparing): the web process's, for one round trip a statement. */
    preparedStatements?: boolean;
    /** Tests and probes: called with each statement as it is sent (postgres.js `debug`). */
    debug?: (connection: number, query: string) => void;
  } = {},
): Database {
  const sql = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    // postgres.js looks array types up (unawaited) on each new connection so JS arrays can be sent
    // as parameters; a connection closed mid-lookup becomes an unhandled rejection. Pools that
    // never send arrays and open connections on demand (exports) turn it off.
    fetch_types: options.fetchTypes ?? true,
    ...(options.debug ? { debug: options.debug } : {}),
    connection: {
      application_name: options.applicationName ?? "flotilla",
      ...(options.statementTimeoutMs ? { statement_timeout: Math.round(options.statementTimeoutMs) } : {}),
      ...(options.lockTimeoutMs ? { lock_timeout: Math.round(options.lockTimeoutMs) } : {}),
    },
  });
  const db = drizzle(options.preparedStatements ? preparing(sql) : sql, { schema });
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
  globalForDb.__flotillaDb ??= createDatabase(databaseUrlFromEnv(), { applicationName: "flotilla-web", preparedStatements: true });
  return globalForDb.__flotillaDb;
}
