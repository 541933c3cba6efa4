import os from "node:os";
import { and, eq, gt, isNull, sql } from "drizzle-orm";
import type { Db } from "@/server/db/client";
import { workerHeartbeats } from "@/server/db/schema";
import { VERSION } from "@/server/runtime/instance";

export async function writeHeartbeat(
  db: Db,
  args: { id: string; capacity: number; running: number; kind?: "worker" | "web" },
): Promise<void> {
  await db
    .insert(workerHeartbeats)
    .values({
      id: args.id,
      kind: args.kind ?? "worker",
      host: os.hostname(),
      pid: process.pid,
      version: VERSION,
      capacity: args.capacity,
      running: args.running,
    })
    .onConflictDoUpdate({
      target: workerHeartbeats.id,
      set: { running: args.running, capacity: args.capacity, lastHeartbeatAt: sql`now()`, stoppedAt: null },
    });
}

export async function markStopped(db: Db, id: string): Promise<void> {
  await db.update(workerHeartbeats).set({ stoppedAt: sql`now()`, running: 0 }).where(eq(workerHeartbeats.id, id));
}

/** A worker is alive when it heartbeated within `withinSeconds` and has not said it stopped. */
export async function countLiveWorkers(db: Db, withinSeconds: number): Promise<number> {
  return (await liveWorkerSlots(db, withinSeconds)).workers;
}

/** The live workers and their slots in all (each its subagent_runtime.max_running). */
export async function liveWorkerSlots(db: Db, withinSeconds: number): Promise<{ workers: number; slots: number }> {
  const [row] = await db
    .select({ n: sql<number>`count(*)::int`, slots: sql<number>`coalesce(sum(${workerHeartbeats.capacity}), 0)::int` })
    .from(workerHeartbeats)
    .where(
      and(
        eq(workerHeartbeats.kind, "worker"),
        isNull(workerHeartbeats.stoppedAt),
        gt(workerHeartbeats.lastHeartbeatAt, sql`now() - make_interval(secs => ${withinSeconds})`),
      ),
    );
  return { workers: row?.n ?? 0, slots: row?.slots ?? 0 };
}

/** Heartbeats every 2 s; "alive" means one within max(10 s, 3 × lease) — a few lease intervals at short leases. */
export const HEARTBEAT_INTERVAL_MS = 2_000;
export function livenessWindowSeconds(leaseSeconds: number): number {
  return Math.max(10, Math.min(3 * leaseSeconds, 60));
}
