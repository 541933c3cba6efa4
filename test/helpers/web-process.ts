import { startWebServer } from "./web-server";

/**
 * A second web process for tests that need two: the real front door and route handlers of
 * test/helpers/web-server.ts in a process of its own, on DATABASE_URL.
 * Usage: tsx --conditions=react-server test/helpers/web-process.ts <port> (the condition makes
 * `import "server-only"` resolve to its empty module). Prints "listening <port>" when ready.
 */
startWebServer({ port: Number(process.argv[2] ?? 0) }).then((server) => {
  process.stdout.write(`listening ${server.port}\n`);
  process.on("SIGTERM", () => void server.close().then(() => process.exit(0)));
});
