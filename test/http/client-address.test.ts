import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { CLIENT_ADDRESS_HEADER, clientAddress } from "@/server/net/client-address";
import { createFrontDoorServer, type FrontDoorOptions } from "@/server/http/front-door";
import { send } from "../helpers/web-server";

/**
 * The client address the front door decides, seen by the handler behind it, over real sockets
 * from distinct loopback source addresses (127.0.0.x all reach a server on 127.0.0.1).
 */

const servers: { close: () => void }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A front door in front of a handler that answers what it was told. */
async function echoServer(options: FrontDoorOptions = {}) {
  const server = createFrontDoorServer((req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      JSON.stringify({
        address: clientAddress(req.headers),
        forwarded: req.headers["x-forwarded-for"] ?? null,
      }),
    );
  }, options);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push({ close: () => server.close() });
  return { port: (server.address() as AddressInfo).port };
}

const seen = async (server: { port: number }, from: string, headers: Record<string, string> = {}) =>
  JSON.parse((await send(server, "/", { from, headers })).body) as { address: string; forwarded: string | null };

describe("client address", () => {
  it("is the TCP peer; a client's own X-Forwarded-For, X-Real-IP or internal header changes nothing", async () => {
    const server = await echoServer();
    expect(await seen(server, "127.0.0.2")).toEqual({ address: "127.0.0.2", forwarded: null });
    const spoofed = await seen(server, "127.0.0.3", {
      "x-forwarded-for": "203.0.113.9, 198.51.100.7",
      "x-real-ip": "203.0.113.10",
      [CLIENT_ADDRESS_HEADER]: "203.0.113.11",
    });
    // The claim goes no further than the front door either.
    expect(spoofed).toEqual({ address: "127.0.0.3", forwarded: null });
  });

  it("follows X-Forwarded-For only from a trusted proxy: the right-most entry that is not a trusted proxy", async () => {
    const server = await echoServer({ trustedProxies: ["127.0.0.2/32", "10.0.0.0/8"] });
    // Through the trusted proxy 127.0.0.2: the client it (and the inner proxy 10.1.2.3) recorded.
    expect((await seen(server, "127.0.0.2", { "x-forwarded-for": "203.0.113.9" })).address).toBe("203.0.113.9");
    expect((await seen(server, "127.0.0.2", { "x-forwarded-for": "198.51.100.1, 203.0.113.9, 10.1.2.3" })).address).toBe(
      "203.0.113.9",
    );
    // What the client wrote left of the real hop is ignored; the trusted proxy's header is passed on.
    expect(await seen(server, "127.0.0.2", { "x-forwarded-for": "6.6.6.6, 203.0.113.9" })).toEqual({
      address: "203.0.113.9",
      forwarded: "6.6.6.6, 203.0.113.9",
    });
    // A trusted proxy that forwarded nothing: the proxy itself.
    expect((await seen(server, "127.0.0.2")).address).toBe("127.0.0.2");
    // Any other peer: its own address, whatever it claims.
    expect(await seen(server, "127.0.0.4", { "x-forwarded-for": "203.0.113.9" })).toEqual({ address: "127.0.0.4", forwarded: null });
  });

  it("normalises IPv4-mapped IPv6 peers and forwarded entries written with ports or brackets", async () => {
    const server = await echoServer({ trustedProxies: ["127.0.0.0/8"] });
    expect((await seen(server, "127.0.0.5", { "x-forwarded-for": "[2001:db8::1]:443" })).address).toBe("2001:db8::1");
    expect((await seen(server, "127.0.0.5", { "x-forwarded-for": "::ffff:203.0.113.9" })).address).toBe("203.0.113.9");
    expect((await seen(server, "127.0.0.5", { "x-forwarded-for": "203.0.113.9:5678" })).address).toBe("203.0.113.9");
  });

  it("is 'unknown' for a request that did not come through the front door", () => {
    expect(clientAddress(new Headers({ "x-forwarded-for": "203.0.113.9" }))).toBe("unknown");
  });
});
