import { randomBytes } from "node:crypto";
import os from "node:os";

/** Identity of this process: lease owner for batch items, owner of in-process runs. */
export const INSTANCE_ID = `${os.hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`;
export const VERSION = process.env.npm_package_version ?? "0.1.0";
