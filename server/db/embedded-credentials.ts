import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

/**
 * Where the embedded PostgreSQL's superuser password lives: generated once, kept beside the
 * cluster folder under the data folder, mode 600. Dependency-free so the CLI can read it without
 * loading embedded-postgres (whose exit hooks would swallow the CLI's exit code).
 */
export const EMBEDDED_PORT = 54329;
export const EMBEDDED_USER = "postgres";
/** The fixed password clusters were initialised with before the password was generated. */
export const LEGACY_EMBEDDED_PASSWORD = "flotilla";
const FILE_NAME = "embedded-postgres-password";

/** The data folder of `npm start` (FLOTILLA_DATA_DIR, default ./.data) and its cluster folder. */
export function defaultDataDir(): string {
  return path.resolve(process.env.FLOTILLA_DATA_DIR ?? path.join(process.cwd(), ".data"));
}

export function passwordFileFor(clusterDir: string): string {
  return path.join(path.dirname(path.resolve(clusterDir)), FILE_NAME);
}

export function readEmbeddedPassword(clusterDir: string): string | null {
  const file = passwordFileFor(clusterDir);
  return existsSync(file) ? readFileSync(file, "utf8").trim() || null : null;
}

export function writeEmbeddedPassword(clusterDir: string, password: string): void {
  const file = passwordFileFor(clusterDir);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, password, { mode: 0o600 });
  chmodSync(file, 0o600); // writeFileSync's mode applies only when it creates the file
}

export function newEmbeddedPassword(): string {
  return randomBytes(24).toString("base64url");
}

/** The URL of `npm start`'s embedded database for the CLI: FLOTILLA_EMBEDDED_PORT and the stored password. */
export function embeddedDatabaseUrl(database = "flotilla"): string {
  const port = Number(process.env.FLOTILLA_EMBEDDED_PORT ?? EMBEDDED_PORT);
  const password = readEmbeddedPassword(path.join(defaultDataDir(), "postgres")) ?? LEGACY_EMBEDDED_PASSWORD;
  return `postgres://${EMBEDDED_USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
}
