/**
 * Next.js calls register() once when a server instance starts, before it serves requests.
 * Only the Node.js runtime touches the database (the edge runtime has no driver); the branch
 * is written as a condition on NEXT_RUNTIME so the edge build drops the import entirely.
 */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME === "nodejs") {
    const { startWebProcess } = await import("./server/web-process");
    await startWebProcess();
  }
}
