import { integer, pgTable, text, timestamp } from "drizzle-orm/pg-core";

/** Heartbeats of worker (and web) processes; "alive" = a heartbeat within a few lease intervals. */
export const workerHeartbeats = pgTable("worker_heartbeats", {
  id: text("id").primaryKey(),
  kind: text("kind", { enum: ["worker", "web"] }).notNull().default("worker"),
  host: text("host").notNull(),
  pid: integer("pid").notNull(),
  version: text("version").notNull(),
  capacity: integer("capacity").notNull(),
  running: integer("running").notNull().default(0),
  startedAt: timestamp("started_at", { withTimezone: true }).notNull().defaultNow(),
  lastHeartbeatAt: timestamp("last_heartbeat_at", { withTimezone: true }).notNull().defaultNow(),
  stoppedAt: timestamp("stopped_at", { withTimezone: true }),
});
