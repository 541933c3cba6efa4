/**
 * Next.js calls register() once when a server instance starts, before it serves requests.
 * Only the Node.js runtime touches the database (the edge runtime has no driver).
 */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== "nodejs") return;
  const startedAt = new Date();
  const { recoverOnStartup, startWebHeartbeat } = await import("./server/startup");
  const { closeMcpClients } = await import("./server/tools/mcp");
  // Next.js owns the signals; on exit the stdio MCP servers this process started are killed
  // (closing aborts their spawn signal synchronously, before the process is gone).
  process.once("exit", () => void closeMcpClients());
  startWebHeartbeat();
  await recoverOnStartup(startedAt);
  // Lead wake-ups and webhook deliveries of settled batches run in web processes only.
  const { startWebSettlementRunner } = await import("./server/chat/wakeup");
  startWebSettlementRunner();
}
