import "server-only";
import { recoverOnStartup, startWebHeartbeat } from "@/server/startup";
import { closeMcpClients } from "@/server/tools/mcp";
import { startWebSettlementRunner } from "@/server/chat/wakeup";

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
}
