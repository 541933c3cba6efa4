import path from "node:path";
import { E2E_DATA_DIR, E2E_PG_PORT, E2E_PORT } from "../../playwright.config";

/** The database the e2e server's embedded PostgreSQL serves (fixed port and credentials). */
export const E2E_DATABASE_URL = `postgres://postgres:flotilla@127.0.0.1:${E2E_PG_PORT}/flotilla`;
export const E2E_BASE_URL = `http://localhost:${E2E_PORT}`;
export const SCREENSHOT_DIR = path.resolve("e2e/screenshots");
export { E2E_DATA_DIR };
