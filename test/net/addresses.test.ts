import { describe, expect, it } from "vitest";
import { allowListed, isRefusedAddress } from "@/server/net/addresses";

/** The shared classifier behind fetch_url and webhook URLs: table-driven, every notation. */

const refused: [string, string][] = [
  ["127.0.0.1", "loopback"],
  ["127.5.5.5", "loopback /8"],
  ["10.1.2.3", "private"],
  ["172.16.0.1", "private"],
  ["172.31.255.255", "private"],
  ["192.168.1.1", "private"],
  ["169.254.169.254", "link-local (cloud metadata)"],
  ["100.64.0.1", "CGNAT"],
  ["100.127.255.255", "CGNAT"],
  ["0.0.0.0", "this network"],
  ["0.1.2.3", "this network /8"],
  ["192.0.0.8", "IETF protocol assignments"],
  ["192.0.2.1", "documentation"],
  ["192.88.99.1", "6to4 relay anycast"],
  ["198.18.0.1", "benchmarking"],
  ["224.0.0.1", "multicast"],
  ["239.255.255.250", "multicast"],
  ["240.0.0.1", "reserved"],
  ["255.255.255.255", "broadcast"],
  ["::", "unspecified"],
  ["::1", "loopback"],
  ["0:0:0:0:0:0:0:1", "loopback, long form"],
  ["fe80::1", "link-local"],
  ["fe80::1%eth0", "link-local with a zone"],
  ["febf:ffff::1", "link-local, top of /10"],
  ["fec0::1", "site-local"],
  ["fc00::1", "unique local"],
  ["fd12:3456::1", "unique local"],
  ["ff02::1", "multicast"],
  ["100::1", "discard-only"],
  ["2001:db8::1", "documentation"],
  ["3fff::1", "documentation"],
  ["2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"],
  ["::1:0:0:0", "reserved ::/8 outside the embeddings"],
  // IPv4-mapped
  ["::ffff:127.0.0.1", "mapped loopback, dotted"],
  ["::ffff:7f00:1", "mapped loopback, hex"],
  ["::ffff:10.0.0.1", "mapped private"],
  ["::ffff:169.254.169.254", "mapped metadata"],
  ["0:0:0:0:0:ffff:a9fe:a9fe", "mapped metadata, long form"],
  ["::FFFF:A9FE:A9FE", "mapped metadata, upper case"],
  // IPv4-compatible and IPv4-translated
  ["::127.0.0.1", "compatible loopback, dotted"],
  ["::7f00:1", "compatible loopback, hex"],
  ["::a9fe:a9fe", "compatible metadata"],
  ["::ffff:0:7f00:1", "translated loopback"],
  ["::ffff:0:10.0.0.1", "translated private"],
  // NAT64
  ["64:ff9b::7f00:1", "well-known NAT64 loopback"],
  ["64:ff9b::127.0.0.1", "well-known NAT64 loopback, dotted"],
  ["64:ff9b::a9fe:a9fe", "well-known NAT64 metadata"],
  ["64:ff9b::a00:1", "well-known NAT64 private"],
  ["64:ff9b::6440:1", "well-known NAT64 CGNAT"],
  ["64:ff9b:1::7f00:1", "local-use NAT64 loopback"],
  // Local-use NAT64, one reading refused and the three others 8.x: /48, /56, /64, /96 readings.
  ["64:ff9b:1:7f08:8:808:808:808", "local-use NAT64 read as /48: 127.8.8.8"],
  ["64:ff9b:1:80a:8:808:808:808", "local-use NAT64 read as /56: 10.8.8.8"],
  ["64:ff9b:1:808:a:808:808:808", "local-use NAT64 read as /64: 10.8.8.8"],
  ["64:ff9b:1:808:8:808:7f00:1", "local-use NAT64 read as /96: 127.0.0.1"],
  ["64:ff9b:2::808:808", "NAT64 space outside the assigned prefixes"],
  // 6to4
  ["2002:7f00:1::", "6to4 loopback"],
  ["2002:7f00:0001:abcd::1", "6to4 loopback with a subnet"],
  ["2002:a9fe:a9fe::1", "6to4 metadata"],
  ["2002:c0a8:101::", "6to4 private"],
  ["2002:6440:1::", "6to4 CGNAT"],
  // not an address
  ["not-an-ip", "a name"],
  ["", "empty"],
  ["127.1", "short IPv4 form (never produced by URL or DNS)"],
];

const allowed: [string, string][] = [
  ["8.8.8.8", "public"],
  ["1.1.1.1", "public"],
  ["172.32.0.1", "just above 172.16/12"],
  ["100.128.0.1", "just above CGNAT"],
  ["169.255.0.1", "just above link-local"],
  ["2606:4700:4700::1111", "public IPv6"],
  ["2a00:1450:4001:80b::200e", "public IPv6"],
  ["::ffff:8.8.8.8", "mapped public"],
  ["::ffff:808:808", "mapped public, hex"],
  ["64:ff9b::808:808", "well-known NAT64 public"],
  ["64:ff9b::8.8.8.8", "well-known NAT64 public, dotted"],
  ["2002:808:808::1", "6to4 public"],
  ["64:ff9b:1:808:8:808:808:808", "local-use NAT64 whose every reading is 8.8.8.8"],
];

describe("isRefusedAddress", () => {
  it.each(refused)("refuses %s (%s)", (address) => {
    expect(isRefusedAddress(address)).toBe(true);
  });

  it.each(allowed)("lets %s through (%s)", (address) => {
    expect(isRefusedAddress(address)).toBe(false);
  });
});

describe("allowListed: host means the scheme's default port, host:port that port", () => {
  const cases: [entries: string[], url: string, expected: boolean][] = [
    [["example.com"], "https://example.com/x", true],
    [["example.com"], "http://example.com/x", true],
    [["example.com"], "https://example.com:443/x", true],
    [["example.com"], "http://example.com:80/x", true],
    [["example.com"], "https://example.com:8443/x", false],
    [["example.com"], "http://example.com:22/x", false],
    [["example.com"], "http://example.com:443/x", false],
    [["Example.COM"], "https://EXAMPLE.com/", true],
    [["example.com"], "https://www.example.com/", false],
    [["example.com"], "https://example.com.evil.test/", false],
    [["example.com:8443"], "https://example.com:8443/", true],
    [["example.com:8443"], "https://example.com/", false],
    [["example.com:8443"], "https://example.com:8444/", false],
    [["127.0.0.1:3000"], "http://127.0.0.1:3000/", true],
    [["127.0.0.1:3000"], "http://127.0.0.1:3001/", false],
    [["127.0.0.1"], "http://127.0.0.1:3000/", false],
    [["127.0.0.1"], "http://127.0.0.1/", true],
    [["[::1]:3000"], "http://[::1]:3000/", true],
    [["[::1]"], "http://[::1]:3000/", false],
    [["[::1]"], "http://[::1]/", true],
    [["::1"], "https://[::1]/", true],
    [["[0:0:0:0:0:0:0:1]:3000"], "http://[::1]:3000/", true],
    [["a.test", "b.test:81"], "http://b.test:81/", true],
    [["b.test:81:82"], "http://b.test:81/", false],
    [[], "http://example.com/", false],
  ];

  it.each(cases)("%j allows %s: %s", (entries, url, expected) => {
    expect(allowListed(entries, new URL(url))).toBe(expected);
  });
});
