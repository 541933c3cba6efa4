import { unstable_doesMiddlewareMatch } from "next/experimental/testing/server";
import { NextRequest } from "next/server";
import { describe, expect, it } from "vitest";
import nextConfig from "@/next.config";
import { config as proxyConfig, proxy } from "@/proxy";

/** Security headers: a nonce CSP on every page (proxy.ts) and static headers on everything (next.config.ts). */

describe("page CSP (proxy.ts)", () => {
  it("sends a fresh nonce CSP without 'unsafe-inline' scripts, framing refused, on pages and redirects alike", async () => {
    const page = await proxy(new NextRequest("http://flotilla.test/signin"));
    const redirect = await proxy(new NextRequest("http://flotilla.test/threads/x"));
    expect(redirect.status).toBe(307);
    const nonces = new Set<string>();
    for (const res of [page, redirect]) {
      const csp = res.headers.get("content-security-policy") ?? "";
      const script = /script-src ([^;]+)/.exec(csp)?.[1] ?? "";
      const nonce = /'nonce-([A-Za-z0-9+/=]+)'/.exec(script)?.[1];
      expect(nonce).toBeTruthy();
      nonces.add(nonce!);
      expect(script).not.toContain("'unsafe-inline'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("object-src 'none'");
      expect(csp).toContain("base-uri 'self'");
    }
    expect(nonces.size).toBe(2);
    // Next reads the nonce from the forwarded request header to stamp its own scripts.
    expect(page.headers.get("x-middleware-request-content-security-policy")).toBe(page.headers.get("content-security-policy"));
  });
});

describe("which paths the proxy sees (proxy.ts matcher, as Next matches it)", () => {
  it("pages go through it; the API, the compatible APIs and /mcp answer 401 themselves", () => {
    const seen = (path: string) => unstable_doesMiddlewareMatch({ config: proxyConfig, url: `http://flotilla.test${path}` });
    for (const path of ["/", "/threads/x", "/settings", "/mcpx"]) expect(seen(path), path).toBe(true);
    for (const path of ["/api/threads", "/v1/batches", "/mcp", "/mcp/"]) expect(seen(path), path).toBe(false);
  });
});

describe("static headers (next.config.ts)", () => {
  it("every path gets nosniff, a referrer policy and no framing; API answers a deny-all CSP", async () => {
    const rules = (await nextConfig.headers?.()) ?? [];
    const all = rules.find((r) => r.source === "/:path*")?.headers ?? [];
    const get = (key: string) => all.find((h) => h.key === key)?.value;
    expect(get("X-Content-Type-Options")).toBe("nosniff");
    expect(get("Referrer-Policy")).toBe("strict-origin-when-cross-origin");
    expect(get("X-Frame-Options")).toBe("DENY");
    const api = rules.find((r) => r.source === "/api/:path*")?.headers ?? [];
    expect(api.find((h) => h.key === "Content-Security-Policy")?.value).toBe("default-src 'none'; frame-ancestors 'none'");
    const mcp = rules.find((r) => r.source === "/mcp")?.headers ?? [];
    expect(mcp.find((h) => h.key === "Content-Security-Policy")?.value).toBe("default-src 'none'; frame-ancestors 'none'");
  });
});
