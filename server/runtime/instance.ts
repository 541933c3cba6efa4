import { randomBytes } from "node:crypto";
import os from "node:os";

/**
 * Identity of this process: lease owner for batch items, owner of in-process runs, the id it
 * heartbeats under. Kept on globalThis: Next bundles this module into several server chunks
 * (instrumentation, each route), and every copy must name the same process, or a run a route
 * started would look owned by a process that never heartbeats.
 *
 * `npm start` gives each child it starts an id of its own (FLOTILLA_INSTANCE_ID, scripts/start.ts)
 * and names the child by it once it dies: host and pid are not unique (containers from one image
 * share a hostname and may share pids), so nothing is ever matched on them.
 */
const globalForInstance = globalThis as unknown as { __flotillaInstanceId?: string };
globalForInstance.__flotillaInstanceId ??=
  process.env.FLOTILLA_INSTANCE_ID || `${os.hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`;
export const INSTANCE_ID: string = globalForInstance.__flotillaInstanceId;
export const VERSION = process.env.npm_package_version ?? "0.1.0";
