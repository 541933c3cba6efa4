import { lookup as dnsLookup } from "node:dns/promises";
import { isIP, type LookupFunction } from "node:net";

/**
 * Which IP addresses outbound requests (fetch_url, webhook deliveries) must not reach, and the
 * `host` / `host:port` allow lists that exempt a destination. Loaded by the worker too, so no
 * server-only here.
 */

type Range = readonly [network: bigint, prefix: number];

function v4ToInt(address: string): bigint {
  return address.split(".").reduce((n, part) => (n << 8n) | BigInt(Number(part)), 0n);
}

/** An IPv6 address (any notation, zone id dropped) as a 128-bit integer. */
function v6ToInt(address: string): bigint {
  let text = address.split("%")[0].toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const v4 = v4ToInt(dotted[1]);
    text = `${text.slice(0, dotted.index)}${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.split("::");
  const headGroups = head ? head.split(":") : [];
  const tailGroups = tail === undefined ? [] : tail ? tail.split(":") : [];
  const zeros = Array(8 - headGroups.length - tailGroups.length).fill("0");
  return [...headGroups, ...zeros, ...tailGroups].reduce((n, g) => (n << 16n) | BigInt(Number.parseInt(g, 16)), 0n);
}

const inRange = (value: bigint, bits: number, [network, prefix]: Range) =>
  value >> BigInt(bits - prefix) === network >> BigInt(bits - prefix);

const v4 = (cidr: string): Range => {
  const [net, prefix] = cidr.split("/");
  return [v4ToInt(net), Number(prefix)];
};
const v6 = (cidr: string): Range => {
  const [net, prefix] = cidr.split("/");
  return [v6ToInt(net), Number(prefix)];
};

// IANA special-purpose IPv4 space that is not globally reachable, plus multicast and 240/4.
const REFUSED_V4 = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.0.2.0/24",
  "192.88.99.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "198.51.100.0/24",
  "203.0.113.0/24",
  "224.0.0.0/4",
  "240.0.0.0/4",
].map(v4);

const isRefusedV4 = (value: bigint) => REFUSED_V4.some((r) => inRange(value, 32, r));

const low32 = (value: bigint) => [value & 0xffffffffn];
/** The four bytes at `bytes` (0 = most significant) of a 128-bit address, as an IPv4 address. */
const pickBytes = (value: bigint, bytes: number[]) =>
  bytes.reduce((n, i) => (n << 8n) | ((value >> BigInt(8 * (15 - i))) & 0xffn), 0n);

/**
 * IPv6 ranges that carry an IPv4 address: the address is refused when an IPv4 address it may
 * stand for is. A local-use NAT64 prefix (64:ff9b:1::/48) may be a /48, /56, /64 or /96, which the
 * address does not tell, so every RFC 6052 reading must be public (bits 64-71 are skipped).
 */
const EMBEDDING: { range: Range; candidates: (value: bigint) => bigint[] }[] = [
  { range: v6("::/96"), candidates: low32 }, // IPv4-compatible; :: and ::1 read as 0.0.0.0 and 0.0.0.1
  { range: v6("::ffff:0:0/96"), candidates: low32 }, // IPv4-mapped
  { range: v6("::ffff:0:0:0/96"), candidates: low32 }, // IPv4-translated (SIIT)
  { range: v6("64:ff9b::/96"), candidates: low32 }, // well-known NAT64
  {
    range: v6("64:ff9b:1::/48"),
    candidates: (value) => [
      pickBytes(value, [6, 7, 9, 10]),
      pickBytes(value, [7, 9, 10, 11]),
      pickBytes(value, [9, 10, 11, 12]),
      pickBytes(value, [12, 13, 14, 15]),
    ],
  },
  { range: v6("2002::/16"), candidates: (value) => [(value >> 80n) & 0xffffffffn] }, // 6to4
];

// Checked after EMBEDDING, so the embedding ranges inside ::/8 and 64:ff9b::/16 are classified
// by their IPv4 address and the rest of those blocks is refused.
const REFUSED_V6 = [
  "::/8", // reserved: unspecified, loopback and the embeddings above
  "64:ff9b::/16", // NAT64 space outside the two assigned prefixes
  "100::/64", // discard-only
  "2001::/23", // IETF protocol assignments: Teredo (embeds an IPv4 address), benchmarking, ORCHID
  "2001:db8::/32", // documentation
  "3fff::/20", // documentation
  "5f00::/16", // SRv6 segment identifiers
  "fc00::/7", // unique local
  "fe80::/10", // link-local
  "fec0::/10", // site-local (deprecated)
  "ff00::/8", // multicast
].map(v6);

/** True for an address outbound requests must not reach (unless allow-listed); false only for a public unicast address. */
export function isRefusedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return isRefusedV4(v4ToInt(address));
  if (family !== 6) return true;
  const value = v6ToInt(address);
  const embedding = EMBEDDING.find((e) => inRange(value, 128, e.range));
  if (embedding) return embedding.candidates(value).some(isRefusedV4);
  return REFUSED_V6.some((r) => inRange(value, 128, r));
}

function defaultPort(protocol: string): string {
  return protocol === "https:" ? "443" : protocol === "http:" ? "80" : "";
}

/** A URL's host without IPv6 brackets, lower-cased. */
export function urlHost(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, "$1").toLowerCase();
}

/**
 * Whether an allow-list entry names the URL's destination. `host` means that host on its
 * scheme's default port (80 for http, 443 for https); `host:port` that port only; IPv6 literals
 * are written `[::1]` or `[::1]:8080`.
 */
export function allowListed(entries: readonly string[], url: URL): boolean {
  const host = urlHost(url);
  const port = Number(url.port || defaultPort(url.protocol));
  return entries.some((raw) => {
    const entry = raw.trim().toLowerCase();
    const match = isIP(entry)
      ? [entry, entry]
      : (/^\[([^\]]+)\](?::(\d+))?$/.exec(entry) ?? /^([^:[\]]+)(?::(\d+))?$/.exec(entry));
    if (!match) return false;
    return sameHost(match[1], host) && Number(match[2] ?? defaultPort(url.protocol)) === port;
  });
}

function sameHost(a: string, b: string): boolean {
  // IPv6 literals compare by value: "0:0:0:0:0:0:0:1" is the URL's "::1".
  return isIP(a) === 6 && isIP(b) === 6 ? v6ToInt(a) === v6ToInt(b) : a === b;
}

export type Address = { address: string; family: number };
export type Resolve = (host: string) => Promise<Address[]>;

const resolveAll: Resolve = (host) => dnsLookup(host, { all: true, verbatim: true });

/**
 * Where a request to `url` would connect: the first address its host resolves to (an IP literal
 * is its own), and, unless the destination is allow-listed, the first answer that must not be
 * reached. Every answer is checked: connecting to "the first public one" would let a mixed
 * answer through. A host that resolves to nothing throws (callers retry or refuse).
 */
export async function destinationOf(
  url: URL,
  allowHosts: readonly string[],
  resolve: Resolve = resolveAll,
): Promise<{ address: Address; refused: Address | undefined }> {
  const host = urlHost(url);
  const family = isIP(host);
  const addresses = family ? [{ address: host, family }] : await resolve(host);
  if (addresses.length === 0) throw new Error(`${host} did not resolve to an address`);
  const refused = allowListed(allowHosts, url) ? undefined : addresses.find((a) => isRefusedAddress(a.address));
  return { address: addresses[0]!, refused };
}

/**
 * Request options that connect to `address` whatever DNS says by then (no rebinding between the
 * check and the connect), still naming the host for TLS.
 */
export function pinnedTo(url: URL, address: Address): { lookup: LookupFunction; servername?: string } {
  const lookup: LookupFunction = (_host, options, callback) => {
    if (options.all) callback(null, [address]);
    else callback(null, address.address, address.family);
  };
  const host = urlHost(url);
  return url.protocol === "https:" && !isIP(host) ? { lookup, servername: host } : { lookup };
}
