import "server-only";
import { recoverOnStartup, startWebHeartbeat } from "@/server/startup";
import { closeMcpClients } from "@/server/tools/mcp";
import { startWebSettlementRunner } from "@/server/chat/wakeup";
import { startQueuedResponses } from "@/server/chat/lead-run";
import { sweepChatApprovals } from "@/server/chat/approval-continuation";
import { getConfig } from "@/server/config/load";
import { resolveModel } from "@/server/models";
import { setupLine } from "@/server/auth/setup-code";
import { getDatabase } from "@/server/db/client";
import { log } from "@/server/log";
import { initTelemetry } from "@/server/telemetry";

/**
 * What a web process starts before it serves requests (instrumentation.ts calls it in the
 * Node.js runtime only; kept out of that file so the edge build never sees Node.js APIs).
 */
export async function startWebProcess(): Promise<void> {
  const startedAt = new Date();
  await initTelemetry("flotilla-web"); // already started by scripts/web.ts under `npm start`
  // Next.js owns the signals; on exit the stdio MCP servers this process started are killed
  // (closing aborts their spawn signal synchronously, before the process is gone).
  process.once("exit", () => void closeMcpClients());
  startWebHeartbeat();
  await recoverOnStartup(startedAt);
  // Lead wake-ups and webhook deliveries of settled batches run in web processes only.
  startWebSettlementRunner();
  startQueueSweep();
  startApprovalSweep();
  await announceSetupLink();
}

/** How often a web process looks for queued chat messages that nothing will start. */
const QUEUE_SWEEP_MS = 5_000;

/**
 * Messages queued behind a busy thread start when its response ends, in the process that ran
 * it. This sweep starts those left behind: at start (after recovery released the dead
 * process's locks) and every few seconds (a process that died meanwhile). Exactly once
 * whichever process notices (startNextQueued).
 */
function startQueueSweep(): void {
  const { db } = getDatabase();
  const config = getConfig();
  const sweep = () =>
    startQueuedResponses(db, { config, model: resolveModel(config) }).catch((err) => log.warn({ err }, "queued chat messages sweep failed"));
  void sweep();
  setInterval(sweep, QUEUE_SWEEP_MS).unref();
}

/** How often a web process denies chat approvals past their time and starts due continuations. */
const APPROVAL_SWEEP_MS = 2_000;

/**
 * Approvals in the chat: calls past tools.approval_timeout_seconds are denied, and a lead reply
 * whose calls are all decided goes on (decided while its thread was busy, or by a process that
 * died before it continued). Exactly once whichever process notices (continueDecidedReply).
 */
function startApprovalSweep(): void {
  const { db } = getDatabase();
  const config = getConfig();
  const sweep = () => sweepChatApprovals(db, { config, model: resolveModel(config) }).catch((err) => log.warn({ err }, "chat approvals sweep failed"));
  void sweep();
  setInterval(sweep, APPROVAL_SWEEP_MS).unref();
}

/**
 * While no account exists, the terminal shows the link that creates the first one (the admin):
 * a plain line on stdout, whatever the log format, so `npm start` alone is enough to begin.
 */
export async function announceSetupLink(write: (line: string) => void = (line) => process.stdout.write(`${line}\n`)): Promise<void> {
  try {
    const line = await setupLine(getDatabase().db);
    if (line) write(line);
  } catch (err) {
    log.warn({ err, event: "setup_link_failed" }, "could not show the setup link; run `npm run --silent cli -- setup-code`");
  }
}
