import "server-only";
import { recoverOnStartup, startWebHeartbeat } from "@/server/startup";
import { closeMcpClients } from "@/server/tools/mcp";
import { startWebSettlementRunner } from "@/server/chat/wakeup";
import { setupLine } from "@/server/auth/setup-code";
import { getDatabase } from "@/server/db/client";
import { log } from "@/server/log";

/**
 * What a web process starts before it serves requests (instrumentation.ts calls it in the
 * Node.js runtime only; kept out of that file so the edge build never sees Node.js APIs).
 */
export async function startWebProcess(): Promise<void> {
  const startedAt = new Date();
  // Next.js owns the signals; on exit the stdio MCP servers this process started are killed
  // (closing aborts their spawn signal synchronously, before the process is gone).
  process.once("exit", () => void closeMcpClients());
  startWebHeartbeat();
  await recoverOnStartup(startedAt);
  // Lead wake-ups and webhook deliveries of settled batches run in web processes only.
  startWebSettlementRunner();
  await announceSetupLink();
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
