import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configSchema } from "@/lib/config";
import { buildGroupTools, ToolCallRecorder } from "@/server/tools";
import { FetchRefusedError, fetchUrl, htmlToMarkdown } from "@/server/tools/web";

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
/** A second local server: same host, another port. */
let other: http.Server;
let otherPort: number;
const otherSeen: string[] = [];
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
    } else if (req.url === "/to-other-port") {
      res.writeHead(302, { location: `http://127.0.0.1:${otherPort}/plain` });
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
  other = http.createServer((req, res) => {
    otherSeen.push(req.url ?? "");
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("other port");
  });
  await new Promise<void>((r) => other.listen(0, "127.0.0.1", r));
  otherPort = (other.address() as AddressInfo).port;
});

afterAll(async () => {
  for (const s of [server, other]) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

const signal = () => new AbortController().signal;
// The local server's host:port; a bare "127.0.0.1" would allow port 80 only.
const allowLocal = () => ({ allowHosts: [`127.0.0.1:${port}`], signal: signal() });

describe("fetchUrl", () => {
  it("turns an allow-listed HTML page into readable markdown without scripts or styles, with GET", async () => {
    const page = await fetchUrl(`http://127.0.0.1:${port}/page`, allowLocal());
    expect(page).toMatchObject({ status: 200, contentType: "text/html", title: "Harbour report", truncated: false });
    expect(page.text).toContain("**1,204**");
    expect(page.text).toMatch(/-\s+Containers: 880/);
    expect(page.text).toContain("[details](/details)");
    expect(page.text).not.toMatch(/do-not-read|injected|color:red|enable js/);
    expect(seen.at(-1)).toMatchObject({ method: "GET", url: "/page" });
  });

  it("follows redirects by hand, checking every hop", async () => {
    const page = await fetchUrl(`http://127.0.0.1:${port}/hop`, allowLocal());
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
    await expect(fetchUrl(`http://127.0.0.1:${port}/to-loopback`, allowLocal())).rejects.toThrow(/127\.0\.0\.2/);
    // Only the first hop reached a server.
    expect(seen.slice(before).map((s) => s.url)).toEqual(["/to-loopback"]);
  });

  it("refuses IPv6 forms that carry a refused IPv4 address (compatible, mapped, NAT64, 6to4), as literals and DNS answers", async () => {
    const before = seen.length;
    const refusedForms = [
      "::ffff:7f00:1",
      "::7f00:1",
      "::ffff:0:7f00:1",
      "64:ff9b::7f00:1",
      "64:ff9b::a9fe:a9fe",
      "64:ff9b:1::7f00:1",
      "2002:7f00:1::",
      "2002:a9fe:a9fe::1",
    ];
    for (const address of refusedForms) {
      const opts = { allowHosts: [], signal: AbortSignal.timeout(3_000) };
      await expect(fetchUrl(`http://[${address}]:${port}/plain`, opts), address).rejects.toBeInstanceOf(FetchRefusedError);
      const resolve = async () => [{ address, family: 6 }];
      await expect(fetchUrl(`http://sneaky.example.com:${port}/plain`, { ...opts, resolve }), address).rejects.toThrow(
        `sneaky.example.com resolves to ${address}`,
      );
    }
    // The metadata address written the way a URL keeps it.
    await expect(
      fetchUrl("http://[::ffff:169.254.169.254]/latest/meta-data/", { allowHosts: [], signal: signal() }),
    ).rejects.toThrow(/resolves to ::ffff:a9fe:a9fe/);
    expect(seen.length).toBe(before);
  });

  it("allow-list entries name a port: a bare host is its default port only", async () => {
    const before = seen.length;
    await expect(fetchUrl(`http://127.0.0.1:${port}/plain`, { allowHosts: ["127.0.0.1"], signal: signal() })).rejects.toThrow(
      /refused: 127\.0\.0\.1 resolves to 127\.0\.0\.1/,
    );
    await expect(
      fetchUrl(`http://127.0.0.1:${port}/plain`, { allowHosts: [`127.0.0.1:${otherPort}`], signal: signal() }),
    ).rejects.toBeInstanceOf(FetchRefusedError);
    expect(seen.length).toBe(before);
    const page = await fetchUrl(`http://localhost:${port}/plain`, { allowHosts: [`localhost:${port}`], signal: signal() });
    expect(page.text).toBe("just text");
  });

  it("re-checks the allow list on every redirect: another port of an allowed host is refused", async () => {
    const before = otherSeen.length;
    await expect(fetchUrl(`http://127.0.0.1:${port}/to-other-port`, allowLocal())).rejects.toThrow(
      /refused: 127\.0\.0\.1 resolves to/,
    );
    expect(otherSeen.length).toBe(before);
    // Listing the second port too lets the same redirect through.
    const both = { allowHosts: [`127.0.0.1:${port}`, `127.0.0.1:${otherPort}`], signal: signal() };
    const page = await fetchUrl(`http://127.0.0.1:${port}/to-other-port`, both);
    expect(page).toMatchObject({ url: `http://127.0.0.1:${otherPort}/plain`, text: "other port" });
    expect(otherSeen.length).toBe(before + 1);
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
    const page = await fetchUrl(`http://pinned.test:${port}/plain`, { allowHosts: [`pinned.test:${port}`], signal: signal(), resolve });
    expect(page.text).toBe("just text");
    expect(lookups).toBe(1);
    expect(seen.at(-1)).toMatchObject({ url: "/plain", host: `pinned.test:${port}` });
  });

  it("caps the body size and says it cut the page", async () => {
    const page = await fetchUrl(`http://127.0.0.1:${port}/big`, { ...allowLocal(), maxBytes: 1_000 });
    expect(page.text).toHaveLength(1_000);
    expect(page.truncated).toBe(true);
  });

  it("refuses non-http schemes and binary content", async () => {
    await expect(fetchUrl("file:///etc/passwd", allowLocal())).rejects.toThrow(/only http and https/);
    await expect(fetchUrl(`http://127.0.0.1:${port}/image`, allowLocal())).rejects.toThrow(/unsupported content type image\/png/);
    await expect(fetchUrl(`http://127.0.0.1:${port}/missing`, allowLocal())).rejects.toThrow(/HTTP 404/);
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
  const call = { toolCallId: "c1", messages: [], abortSignal: signal() };
  const ctxAllowing = (allow: string[]) => {
    const config = configSchema.parse({ tools: { web_allow_hosts: allow, call_timeout_seconds: 1, max_output_chars: 100 } });
    return { db: undefined as never, config, userId: "u", threadId: null, runId: "r", signal: signal() };
  };

  it("bounds the output, records the call, and ends a hanging fetch at tools.call_timeout_seconds", async () => {
    const ctx = ctxAllowing([`127.0.0.1:${port}`]);
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

  it("reads tools.web_allow_hosts as host (default port) or host:port", async () => {
    const bare = await buildGroupTools(["web"], ctxAllowing(["127.0.0.1"]), new ToolCallRecorder());
    await expect(bare.fetch_url.execute?.({ url: `http://127.0.0.1:${port}/plain` }, call)).rejects.toThrow(/refused: 127\.0\.0\.1/);
    const exact = await buildGroupTools(["web"], ctxAllowing([`127.0.0.1:${port}`]), new ToolCallRecorder());
    expect(await exact.fetch_url.execute?.({ url: `http://127.0.0.1:${port}/plain` }, call)).toContain("just text");
  });
});
