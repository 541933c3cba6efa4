import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * The compatible APIs' real HTTP server: the tests' web server (test/helpers/web-server.ts,
 * every route handler behind the front door); the SDKs need a socket. Run as a script
 * (`tsx --conditions=react-server test/compat/http-server.ts <port>`, so the route modules'
 * `import "server-only"` resolves to its empty module) it is the web process of bench/compat.bench.ts.
 */

export type CompatServer = WebServer;

export const startCompatServer = (port = 0): Promise<CompatServer> => startWebServer({ port, preload: ["/v1/"] });

if (process.argv[1]?.endsWith("http-server.ts")) {
  startCompatServer(Number(process.argv[2] ?? 0)).then((s) => process.stdout.write(`listening ${s.origin}\n`));
}
