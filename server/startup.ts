import "server-only";
import { and, eq, inArray, sql } from "drizzle-orm";
import { recoverInterruptedRuns } from "@/server/agent/runs";
import { settleDeadContinuations } from "@/server/chat/approval-continuation";
import { insertMessage } from "@/server/chat/messages";
import { closeAbandonedStreams } from "@/server/chat/streams";
import { type DbOrTx, getDatabase } from "@/server/db/client";
import { agentRuns, messages } from "@/server/db/schema";
import { log } from "@/server/log";
import { HEARTBEAT_INTERVAL_MS, writeHeartbeat } from "@/server/runtime/heartbeat";
import { getProcessCapacity } from "@/server/runtime/capacity";
import { INSTANCE_ID } from "@/server/runtime/instance";

/**
 * The web process heartbeats too (kind "web"), so a second web process starting up does not
 * take this one's in-flight runs for orphans and finalize them as interrupted.
 */
export function startWebHeartbeat(): void {
  const beat = () => {
    const capacity = getProcessCapacity();
    const { running } = capacity.stats();
    return writeHeartbeat(getDatabase().db, { id: INSTANCE_ID, kind: "web", capacity: capacity.maxRunning, running });
  };
  beat().catch((err) => log.warn({ err }, "web heartbeat failed"));
  setInterval(() => beat().catch((err) => log.warn({ err }, "web heartbeat failed")), HEARTBEAT_INTERVAL_MS).unref();
}

/**
 * Web process start: finalize runs that a previous process left pending or running as
 * `interrupted` (through the normal finish path) and tell each affected thread. They are not
 * restarted. Failure is logged, never fatal: the app still serves.
 */
export async function recoverOnStartup(startedAt: Date = new Date()): Promise<string[]> {
  try {
    const { db } = getDatabase();
    const { interrupted } = await recoverInterruptedRuns(db, { instanceId: INSTANCE_ID, startedBefore: startedAt });
    if (interrupted.length) {
      log.warn({ count: interrupted.length, run_ids: interrupted }, "finalized runs left active by a previous process as interrupted");
      await noteInterruptedRuns(db, interrupted);
      await settleDeadContinuations(db, await threadsOfLeadRuns(db, interrupted));
    }
    // Their resumable streams end too (readers stop waiting, the threads take messages again).
    await closeAbandonedStreams(db);
    return interrupted;
  } catch (err) {
    log.error({ err }, "restart recovery of agent runs failed");
    return [];
  }
}

/** The threads of the lead runs among `runIds`. */
async function threadsOfLeadRuns(db: DbOrTx, runIds: string[]): Promise<string[]> {
  const rows = await db
    .select({ threadId: agentRuns.threadId })
    .from(agentRuns)
    .where(and(inArray(agentRuns.id, runIds), eq(agentRuns.kind, "lead")));
  return rows.flatMap((r) => (r.threadId ? [r.threadId] : []));
}

const PROMPT_EXCERPT = 80;

/**
 * A process that dies mid-response never stores its reply, so the thread would show nothing.
 * For each interrupted lead response without a stored reply, add one assistant message that
 * says what was interrupted and that it needs checking. Replies that were stored already show
 * their sub-agent cards, which read the interrupted status from the runs.
 */
export async function noteInterruptedRuns(db: DbOrTx, runIds: string[]): Promise<number> {
  if (runIds.length === 0) return 0;
  const rows = await db
    .select({
      id: agentRuns.id,
      threadId: agentRuns.threadId,
      rootRunId: agentRuns.rootRunId,
      kind: agentRuns.kind,
      definition: agentRuns.definition,
      prompt: agentRuns.prompt,
    })
    .from(agentRuns)
    .where(and(inArray(agentRuns.id, runIds), eq(agentRuns.status, "interrupted")));
  const byRoot = new Map<string, { threadId: string; children: typeof rows }>();
  for (const row of rows) {
    if (!row.threadId || row.kind === "batch_item") continue;
    const root = row.kind === "lead" ? row.id : (row.rootRunId ?? row.id);
    const entry = byRoot.get(root) ?? { threadId: row.threadId, children: [] };
    if (row.kind !== "lead") entry.children.push(row);
    byRoot.set(root, entry);
  }
  let written = 0;
  for (const [rootRunId, { threadId, children }] of byRoot) {
    const [stored] = await db
      .select({ id: messages.id })
      .from(messages)
      .where(and(eq(messages.threadId, threadId), sql`${messages.metadata}->>'runId' = ${rootRunId}`))
      .limit(1);
    if (stored) continue;
    const lines = children.map((c) => {
      const prompt = (c.prompt ?? "").replace(/\s+/g, " ").trim();
      const excerpt = prompt.length > PROMPT_EXCERPT ? `${prompt.slice(0, PROMPT_EXCERPT - 1)}…` : prompt;
      return `- ${c.definition}: ${excerpt || "(no prompt)"}`;
    });
    const text = [
      "This response was interrupted by a server restart and was not resumed.",
      children.length
        ? `${children.length} sub-agent run${children.length === 1 ? " was" : "s were"} stopped as interrupted and not restarted; ` +
          "work they had started may be partly done and needs checking:"
        : "",
      ...lines,
      "Send the request again to continue.",
    ]
      .filter(Boolean)
      .join("\n");
    try {
      await insertMessage(db, {
        threadId,
        message: {
          id: `interrupted_${rootRunId}`,
          role: "assistant",
          parts: [{ type: "text", text }],
          metadata: { runId: rootRunId, status: "failed" },
        },
      });
      written++;
    } catch (err) {
      // Already noted (a second recovery pass): the id is deterministic.
      log.info({ err, run_id: rootRunId }, "interrupted note not written");
    }
  }
  return written;
}
