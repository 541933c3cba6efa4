import { BlockList, isIP } from "node:net";

/**
 * Who a request came from. The front door (server/http/front-door.ts) decides it from the TCP
 * peer and, only behind a trusted proxy, X-Forwarded-For; it writes the answer into this header
 * on every request, replacing whatever a client sent under the same name. Plain Node: the front
 * door runs in a script that never loads server-only.
 */
export const CLIENT_ADDRESS_HEADER = "x-flotilla-client-address";

/** The address the front door decided; "unknown" when the request did not come through it. */
export function clientAddress(headers: Headers | Record<string, string | string[] | undefined>): string {
  const value = headers instanceof Headers ? headers.get(CLIENT_ADDRESS_HEADER) : headers[CLIENT_ADDRESS_HEADER];
  const address = (Array.isArray(value) ? value[0] : value)?.trim();
  return address ? address.slice(0, 64) : "unknown";
}

/** `::ffff:1.2.3.4` → `1.2.3.4`; `[::1]` and `1.2.3.4:5678` (as some proxies write them) → the address. */
export function normalizeAddress(raw: string): string {
  let address = raw.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(address);
  if (bracketed) address = bracketed[1]!;
  else if (/^\d{1,3}(\.\d{1,3}){3}:\d+$/.test(address)) address = address.slice(0, address.lastIndexOf(":"));
  const mapped = /^::ffff:(\d{1,3}(\.\d{1,3}){3})$/i.exec(address);
  if (mapped) address = mapped[1]!;
  return address.toLowerCase();
}

/** The trusted proxies (CIDRs or single addresses, as `http.trusted_proxies` holds them). */
export function trustedProxyList(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [address, prefix] = entry.split("/");
    const type = isIP(address ?? "") === 6 ? "ipv6" : "ipv4";
    if (prefix === undefined) list.addAddress(address!, type);
    else list.addSubnet(address!, Number(prefix), type);
  }
  return list;
}

export function isTrusted(list: BlockList, address: string): boolean {
  const family = isIP(address);
  return family !== 0 && list.check(address, family === 6 ? "ipv6" : "ipv4");
}

/**
 * The client of a request whose TCP peer is `peer`: the peer itself, unless the peer is a
 * trusted proxy; then the right-most X-Forwarded-For entry that is not a trusted proxy (each
 * trusted hop vouches only for the entry it appended). A chain of nothing but trusted proxies
 * ends at its left-most entry.
 */
export function resolveClientAddress(peer: string | undefined, forwardedFor: string | undefined, trusted: BlockList): string {
  if (!peer) return "unknown";
  let client = normalizeAddress(peer);
  if (!isTrusted(trusted, client)) return client;
  const hops = (forwardedFor ?? "").split(",").map(normalizeAddress).filter(Boolean);
  for (let i = hops.length - 1; i >= 0; i--) {
    client = hops[i]!;
    if (!isTrusted(trusted, client)) break;
  }
  return client.slice(0, 64);
}
