import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * The compatible APIs' real HTTP server: the tests' web server (test/helpers/web-server.ts,
 * every route handler behind the front door); the SDKs need a socket.
 */

export type CompatServer = WebServer;

export const startCompatServer = (port = 0): Promise<CompatServer> => startWebServer({ port, preload: ["/v1/"] });
