import { at } from "./columns";
import { integer, pgTable, text, } from "drizzle-orm/pg-core";

/** Heartbeats of worker (and web) processes; "alive" = a heartbeat within a few lease intervals. */
export const workerHeartbeats = pgTable("worker_heartbeats", {
  id: text("id").primaryKey(),
  kind: text("kind", { enum: ["worker", "web"] }).notNull().default("worker"),
  host: text("host").notNull(),
  pid: integer("pid").notNull(),
  version: text("version").notNull(),
  capacity: integer("capacity").notNull(),
  running: integer("running").notNull().default(0),
  startedAt: at("started_at").notNull().defaultNow(),
  lastHeartbeatAt: at("last_heartbeat_at").notNull().defaultNow(),
  stoppedAt: at("stopped_at"),
});
