import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";
import { buildGroupTools, ToolCallRecorder } from "@/server/tools";
import { FetchRefusedError, fetchUrl, htmlToMarkdown, isRefusedAddress } from "@/server/tools/web";

/** fetch_url against a local HTTP server only (allow-listed); every refusal happens before a connection. */

const PAGE = `<!doctype html><html><head><title>Harbour report</title><style>body{color:red}</style>
<script>window.secret = "do-not-read";</script></head><body>
<nav>Home | About</nav>
<article><h1>Harbour report</h1><p>The harbour handled <strong>1,204</strong> ships in March, a record for the port.
Most of them were container ships; a few were ferries and fishing boats that stayed for the season.</p>
<ul><li>Containers: 880</li><li>Ferries: 210</li></ul>
<p>Read the <a href="/details">details</a>. The pilots worked in three shifts to keep the lanes open at night.</p>
<script>document.write("injected")</script><noscript>enable js</noscript></article></body></html>`;

let server: http.Server;
let port: number;
const seen: { method: string; url: string; host: string }[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", host: req.headers.host ?? "" });
    if (req.url === "/page") {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end(PAGE);
    } else if (req.url === "/plain") {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("just text");
    } else if (req.url === "/hop") {
      res.writeHead(302, { location: "/plain" });
      res.end();
    } else if (req.url?.startsWith("/to-loopback")) {
      res.writeHead(301, { location: `http://127.0.0.2:${port}/plain` });
      res.end();
    } else if (req.url === "/big") {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end("x".repeat(50_000));
    } else if (req.url === "/hang") {
      // Never answers: the tool's time bound must end the call.
    } else if (req.url === "/image") {
      res.writeHead(200, { "content-type": "image/png" });
      res.end(Buffer.alloc(10));
    } else {
      res.writeHead(404);
      res.end("nope");
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const signal = () => new AbortController().signal;
const allowLocal = { allowHosts: ["127.0.0.1"], signal: signal() };

describe("isRefusedAddress", () => {
  it("refuses loopback, private, link-local, CGNAT, multicast and unspecified, v4 and v6 (v4-mapped too)", () => {
    for (const a of [
      "127.0.0.1",
      "127.5.5.5",
      "10.1.2.3",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "100.127.255.255",
      "224.0.0.1",
      "239.255.255.250",
      "0.0.0.0",
      "255.255.255.255",
      "::",
      "::1",
      "fe80::1",
      "fc00::1",
      "fd12:3456::1",
      "ff02::1",
      "::ffff:127.0.0.1",
      "::ffff:10.0.0.1",
      "::ffff:7f00:1",
      "not-an-ip",
    ])
      expect(isRefusedAddress(a), a).toBe(true);
  });

  it("lets public addresses through", () => {
    for (const a of ["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
      expect(isRefusedAddress(a), a).toBe(false);
  });
});

describe("fetchUrl", () => {
  it("turns an allow-listed HTML page into readable markdown without scripts or styles, with GET", async () => {
    const page = await fetchUrl(`http://127.0.0.1:${port}/page`, allowLocal);
    expect(page).toMatchObject({ status: 200, contentType: "text/html", title: "Harbour report", truncated: false });
    expect(page.text).toContain("**1,204**");
    expect(page.text).toMatch(/-\s+Containers: 880/);
    expect(page.text).toContain("[details](/details)");
    expect(page.text).not.toMatch(/do-not-read|injected|color:red|enable js/);
    expect(seen.at(-1)).toMatchObject({ method: "GET", url: "/page" });
  });

  it("follows redirects by hand, checking every hop", async () => {
    const page = await fetchUrl(`http://127.0.0.1:${port}/hop`, allowLocal);
    expect(page).toMatchObject({ url: `http://127.0.0.1:${port}/plain`, text: "just text" });
  });

  it("refuses loopback without the allow list, before connecting", async () => {
    const before = seen.length;
    await expect(fetchUrl(`http://127.0.0.1:${port}/plain`, { allowHosts: [], signal: signal() })).rejects.toThrow(
      /refused: 127\.0\.0\.1 resolves to 127\.0\.0\.1.*tools\.web_allow_hosts/,
    );
    await expect(fetchUrl(`http://[::1]:${port}/plain`, { allowHosts: [], signal: signal() })).rejects.toBeInstanceOf(
      FetchRefusedError,
    );
    expect(seen.length).toBe(before);
  });

  it("refuses 10.x and other private ranges (no packet is sent: the check comes first)", async () => {
    await expect(fetchUrl("http://10.0.0.1/", { allowHosts: [], signal: signal() })).rejects.toThrow(/10\.0\.0\.1/);
    await expect(fetchUrl("http://192.168.0.10:8080/x", { allowHosts: [], signal: signal() })).rejects.toBeInstanceOf(
      FetchRefusedError,
    );
    await expect(fetchUrl("http://[::ffff:10.0.0.1]/", { allowHosts: [], signal: signal() })).rejects.toBeInstanceOf(
      FetchRefusedError,
    );
  });

  it("refuses a redirect from an allowed host into loopback", async () => {
    const before = seen.length;
    await expect(fetchUrl(`http://127.0.0.1:${port}/to-loopback`, allowLocal)).rejects.toThrow(/127\.0\.0\.2/);
    // Only the first hop reached a server.
    expect(seen.slice(before).map((s) => s.url)).toEqual(["/to-loopback"]);
  });

  it("refuses a DNS name that resolves to 127.0.0.1 (localhost, and a public-looking name)", async () => {
    await expect(fetchUrl(`http://localhost:${port}/plain`, { allowHosts: [], signal: signal() })).rejects.toThrow(
      /refused: localhost resolves to/,
    );
    const resolve = async () => [{ address: "127.0.0.1", family: 4 }];
    await expect(
      fetchUrl(`http://news.example.com:${port}/plain`, { allowHosts: [], signal: signal(), resolve }),
    ).rejects.toThrow(/news\.example\.com resolves to 127\.0\.0\.1/);
    // A mixed answer is refused too: the one private address is enough.
    const mixed = async () => [
      { address: "93.184.216.34", family: 4 },
      { address: "10.0.0.7", family: 4 },
    ];
    await expect(fetchUrl("http://mixed.example.com/", { allowHosts: [], signal: signal(), resolve: mixed })).rejects.toThrow(
      /10\.0\.0\.7/,
    );
  });

  it("connects to the address it checked, not to a second DNS answer (rebinding)", async () => {
    let lookups = 0;
    // The first answer is the one checked and used; a rebinding resolver would answer differently later.
    const resolve = async () => {
      lookups++;
      return lookups === 1 ? [{ address: "127.0.0.1", family: 4 }] : [{ address: "10.9.9.9", family: 4 }];
    };
    const page = await fetchUrl(`http://pinned.test:${port}/plain`, { allowHosts: ["pinned.test"], signal: signal(), resolve });
    expect(page.text).toBe("just text");
    expect(lookups).toBe(1);
    expect(seen.at(-1)).toMatchObject({ url: "/plain", host: `pinned.test:${port}` });
  });

  it("caps the body size and says it cut the page", async () => {
    const page = await fetchUrl(`http://127.0.0.1:${port}/big`, { ...allowLocal, maxBytes: 1_000 });
    expect(page.text).toHaveLength(1_000);
    expect(page.truncated).toBe(true);
  });

  it("refuses non-http schemes and binary content", async () => {
    await expect(fetchUrl("file:///etc/passwd", allowLocal)).rejects.toThrow(/only http and https/);
    await expect(fetchUrl(`http://127.0.0.1:${port}/image`, allowLocal)).rejects.toThrow(/unsupported content type image\/png/);
    await expect(fetchUrl(`http://127.0.0.1:${port}/missing`, allowLocal)).rejects.toThrow(/HTTP 404/);
  });
});

describe("htmlToMarkdown", () => {
  it("falls back to the whole body when Readability finds no article", () => {
    const { markdown, title } = htmlToMarkdown("<html><head><title>T</title></head><body><p>Short.</p><script>x()</script></body></html>");
    expect(title).toBe("T");
    expect(markdown).toBe("Short.");
  });
});

describe("the web group through the registry", () => {
  const config = configSchema.parse({ tools: { web_allow_hosts: ["127.0.0.1"], call_timeout_seconds: 1, max_output_chars: 100 } });
  const ctx = { db: undefined as never, config, userId: "u", threadId: null, runId: "r", signal: signal() };
  const call = { toolCallId: "c1", messages: [], abortSignal: signal() };

  it("bounds the output, records the call, and ends a hanging fetch at tools.call_timeout_seconds", async () => {
    const recorder = new ToolCallRecorder();
    const tools = await buildGroupTools(["web"], ctx, recorder);
    const out = (await tools.fetch_url.execute?.({ url: `http://127.0.0.1:${port}/big` }, call)) as string;
    expect(out).toMatch(/^Source: http:\/\/127\.0\.0\.1:\d+\/big\n\nx+\n\[output cut at 100 characters\]$/);
    const started = Date.now();
    await expect(tools.fetch_url.execute?.({ url: `http://127.0.0.1:${port}/hang` }, { ...call, toolCallId: "c2" })).rejects.toThrow(
      /did not finish within 1s \(tools\.call_timeout_seconds\)/,
    );
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(recorder.calls.map((c) => [c.id, c.name, c.status])).toEqual([
      ["c1", "fetch_url", "ok"],
      ["c2", "fetch_url", "error"],
    ]);
    expect(recorder.calls[0].args_preview).toContain("/big");
    expect(recorder.calls[0].result_preview.length).toBeLessThanOrEqual(300);
    expect(recorder.calls[1].duration_ms).toBeGreaterThanOrEqual(900);
  });
});
