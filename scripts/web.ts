/**
 * The web process of `npm start` (scripts/start.ts runs it): Next's production server behind
 * the front door (server/http/front-door.ts), which decides each request's client address and
 * answers 408 to a body that arrives too slowly. `next start` would keep a client's own
 * X-Forwarded-For and let a trickled body hold its request for minutes.
 */
import path from "node:path";
import { ConfigError, loadConfig } from "../server/config/load";
import { assertConfiguredOutputSchemas } from "../server/runtime/output-schema";
import { createFrontDoorServer } from "../server/http/front-door";
import { initTelemetry, shutdownTelemetry } from "../server/telemetry";

const root = process.cwd();
const port = Number(process.env.PORT ?? 3000);

async function main() {
  let trustedProxies: string[];
  try {
    const config = loadConfig();
    assertConfiguredOutputSchemas(config);
    trustedProxies = config.http.trusted_proxies;
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(1);
    }
    throw err;
  }
  // Before Next loads, so the front door's request spans and the routes' share one provider.
  await initTelemetry("flotilla-web");
  // As `next start` sets it, before Next loads; the build it serves is a production build.
  (process.env as Record<string, string>).NODE_ENV = "production";
  const { default: next } = await import("next");
  const app = next({ dev: false, dir: path.resolve(root), port, hostname: "localhost" });
  await app.prepare();
  const handle = app.getRequestHandler();
  const server = createFrontDoorServer((req, res) => handle(req, res), { trustedProxies });
  server.on("error", (err: NodeJS.ErrnoException) => {
    console.error(`[flotilla] web cannot listen on port ${port}: ${err.code === "EADDRINUSE" ? "the port is in use (set PORT)" : err.message}`);
    process.exit(1);
  });
  // Every interface, as `next start` listens.
  server.listen(port);

  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    server.close(
      () =>
        void app
          .close()
          .then(shutdownTelemetry)
          .finally(() => process.exit(signal === "SIGINT" ? 130 : 143)),
    );
    server.closeIdleConnections();
    // A streaming chat answer would hold the close open; the run itself is recovered on the next start.
    setTimeout(() => server.closeAllConnections(), 5_000).unref();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

main().catch((err) => {
  console.error(`[flotilla] web failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exit(1);
});
