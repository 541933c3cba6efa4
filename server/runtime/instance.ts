import { randomBytes } from "node:crypto";
import os from "node:os";

/**
 * Identity of this process: lease owner for batch items, owner of in-process runs, the id it
 * heartbeats under. Kept on globalThis: Next bundles this module into several server chunks
 * (instrumentation, each route), and every copy must name the same process, or a run a route
 * started would look owned by a process that never heartbeats.
 */
const globalForInstance = globalThis as unknown as { __flotillaInstanceId?: string };
globalForInstance.__flotillaInstanceId ??= `${os.hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`;
export const INSTANCE_ID: string = globalForInstance.__flotillaInstanceId;
export const VERSION = process.env.npm_package_version ?? "0.1.0";
