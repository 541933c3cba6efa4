import path from "node:path";
import { E2E_DATA_DIR, E2E_PG_PORT, E2E_PORT } from "./ports";
import { readEmbeddedPassword } from "../../server/db/embedded-credentials";

/**
 * The database the e2e server's embedded PostgreSQL serves: its port, and the password it
 * generated in its data folder (read when called: the server creates it at start).
 */
export function e2eDatabaseUrl(): string {
  const password = readEmbeddedPassword(path.resolve(E2E_DATA_DIR, "postgres"));
  if (!password) throw new Error(`no embedded-database password under ${E2E_DATA_DIR}; is the e2e server running?`);
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${E2E_PG_PORT}/flotilla`;
}
export const E2E_BASE_URL = `http://localhost:${E2E_PORT}`;
export const SCREENSHOT_DIR = path.resolve("e2e/screenshots");
export { E2E_DATA_DIR };
