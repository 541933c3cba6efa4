import { sql } from "drizzle-orm";
import { noticeOptions } from "@/lib/api/model-facts";
import { CHILDREN_SETTLED, type ChildrenSettledNotice, type SettledChild } from "@/lib/api/subagents";
import { abortBackground, recoverBackgroundCalls } from "@/server/agent/background";
import type { Db } from "@/server/db/client";
import { log } from "@/server/log";
import type { WakeupKind } from "./lead-wakeup";
import { onChatStreamEvent } from "./streams";

/**
 * Waking the lead when the children of a background `task` / `agent_swarm` call have settled
 * (server/agent/background.ts settles the `child_wakeups` row). A web process claims and runs
 * it as one wake-up (lead-wakeup.ts: exactly once, under the thread's stream lock, a notice
 * instead over the quota or chat.max_system_turns); this module says what it reports: each
 * child's outcome, stored with `{ trigger: "children_settled", run_ids }`.
 */

/** Wake-ups one user may have running at once, across every web process (as batch wake-ups). */
export { WAKEUP_PER_USER_LIMIT as CHILD_WAKEUP_PER_USER_LIMIT } from "./lead-wakeup";
/** Background calls of gone processes are looked for this often (OWNER_SILENT_SECONDS bounds the wait). */
const RECOVERY_INTERVAL_MS = 5_000;

export interface ChildWakeupRow extends Record<string, unknown> {
  id: number;
  thread_id: string;
  user_id: string;
  lead_run_id: string;
  tool_call_id: string;
  tool: "task" | "agent_swarm";
  run_ids: string[];
  interrupted: boolean;
  result: { children?: SettledChild[] } | null;
  attempts: number;
  message_id: string | null;
}

export function childrenNotice(row: ChildWakeupRow): ChildrenSettledNotice {
  return {
    kind: "children_settled",
    tool: row.tool,
    tool_call_id: row.tool_call_id,
    run_ids: row.run_ids,
    interrupted: row.interrupted,
    children: row.result?.children ?? [],
  };
}

/** The notice as the lead model reads it: each child's outcome, and what to do with them. */
export function childrenNoticeText(n: ChildrenSettledNotice): string {
  const what = n.tool === "task" ? "background task" : "background agent_swarm";
  const lines = [
    `[Automatic notice, not a user message] The ${what} you started (tool call ${n.tool_call_id}) has settled.`,
  ];
  if (n.interrupted)
    lines.push("The server restarted while it ran: children that had not finished were marked interrupted and not restarted.");
  for (const c of n.children) {
    lines.push("", `${c.item_id ? `${c.item_id} ` : ""}(${c.definition}, run ${c.run_id}) ${c.status}`);
    if (c.status === "completed" && c.result) lines.push(c.result);
    else if (c.error) lines.push(`error: ${c.error}`);
  }
  lines.push(
    "",
    "Tell the user in a short message what it produced and what (if anything) needs their attention. Do not start it again.",
  );
  return lines.join("\n");
}

/** What a settled background call's wake-up reports; its reply's id is derived from the row. */
export const childWakeups: WakeupKind<ChildWakeupRow> = {
  table: "child_wakeups",
  due: sql`w.settled_at is not null`,
  returning: sql`w.id, w.thread_id, w.user_id, w.lead_run_id, w.tool_call_id, w.tool, w.run_ids::text[] as run_ids,
                 w.interrupted, w.result, w.attempts, w.message_id`,
  report: async (_db, row) => {
    const notice = childrenNotice(row);
    const finished =
      `The background ${row.tool === "task" ? "task" : "swarm"} finished ` +
      `(${notice.children.map((c) => `${c.item_id ?? c.definition}: ${c.status}`).join(", ")})`;
    return {
      messageId: `bgwake_${row.id}`,
      text: childrenNoticeText(notice),
      providerMetadata: noticeOptions(notice),
      metadata: { trigger: CHILDREN_SETTLED, run_ids: row.run_ids },
      refused: (why) => `${finished}, but I did not read its results: ${why}. Its results are on its card above.`,
      gaveUp: (error) => `${finished}, but I could not report on it: ${error}. Its results are on its card above.`,
    };
  },
};

/**
 * What a web process runs beside the wake-up pool: Stop of a lead run (or of a background
 * task's child) from any process reaches the background calls running here, and background
 * calls of processes that are gone are marked interrupted and settled. Returns the stop function.
 */
export function startBackgroundSweeps(options: { db: Db; intervalMs?: number }): () => void {
  let stopped = false;
  let unsubscribe: (() => void) | undefined;
  void onChatStreamEvent(options.db, (payload) => {
    if (payload.startsWith("stop:")) abortBackground(payload.slice("stop:".length));
  }).then((off) => {
    if (stopped) off();
    else unsubscribe = off;
  });
  const recover = () =>
    recoverBackgroundCalls(options.db).catch((err) => log.warn({ err }, "recovery of background calls failed"));
  const timer = setInterval(recover, options.intervalMs ?? RECOVERY_INTERVAL_MS);
  timer.unref();
  void recover();
  return () => {
    stopped = true;
    clearInterval(timer);
    unsubscribe?.();
  };
}
