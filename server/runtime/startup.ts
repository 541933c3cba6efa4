import { recoverInterruptedRuns } from "@/server/agent/runs";
import { getDatabase } from "@/server/db/client";
import { log } from "@/server/log";
import { INSTANCE_ID } from "./instance";

/**
 * Web process start: finalize runs that a previous process left pending or running as
 * `interrupted` (through the normal finish path). They are not restarted; the thread shows
 * them as interrupted and needing a check. Failure is logged, never fatal: the app still serves.
 */
export async function recoverOnStartup(startedAt: Date = new Date()): Promise<string[]> {
  try {
    const { interrupted } = await recoverInterruptedRuns(getDatabase().db, { instanceId: INSTANCE_ID, startedBefore: startedAt });
    if (interrupted.length) log.warn({ count: interrupted.length, run_ids: interrupted }, "finalized runs left active by a previous process as interrupted");
    return interrupted;
  } catch (err) {
    log.error({ err }, "restart recovery of agent runs failed");
    return [];
  }
}
