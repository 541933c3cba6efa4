import { afterEach, describe, expect, it } from "vitest";
import { authOptionsFor, redirectWithin, requestOrigin } from "@/server/auth/options";

/** Sign-out and sign-in redirects land on the origin the person came through (issue #23, point 4). */

const saved = process.env.NEXTAUTH_URL;
afterEach(() => {
  if (saved === undefined) delete process.env.NEXTAUTH_URL;
  else process.env.NEXTAUTH_URL = saved;
});

const req = (url: string, headers: Record<string, string> = {}) => new Request(url, { headers });

describe("redirectWithin", () => {
  it("resolves a path against the origin and keeps full URLs of that origin only", () => {
    expect(redirectWithin("http://127.0.0.1:3000", "/signin")).toBe("http://127.0.0.1:3000/signin");
    expect(redirectWithin("http://127.0.0.1:3000", "http://127.0.0.1:3000/threads/x?a=1")).toBe("http://127.0.0.1:3000/threads/x?a=1");
    // Another host, a protocol-relative path or garbage never leave the origin.
    expect(redirectWithin("http://127.0.0.1:3000", "http://localhost:3000/signin")).toBe("http://127.0.0.1:3000");
    expect(redirectWithin("http://127.0.0.1:3000", "//evil.example/x")).toBe("http://127.0.0.1:3000");
    expect(redirectWithin("http://127.0.0.1:3000", "javascript:alert(1)")).toBe("http://127.0.0.1:3000");
  });
});

describe("requestOrigin", () => {
  it("reads the Host the browser used, or what a proxy forwarded", () => {
    expect(requestOrigin(req("http://localhost:3000/api/auth/signout", { host: "192.168.1.20:3000" }))).toBe("http://192.168.1.20:3000");
    expect(
      requestOrigin(req("http://localhost:3000/api/auth/signout", { host: "internal:3000", "x-forwarded-host": "flotilla.example", "x-forwarded-proto": "https" })),
    ).toBe("https://flotilla.example");
    expect(requestOrigin(req("http://127.0.0.1:4000/x"))).toBe("http://127.0.0.1:4000");
  });
});

describe("authOptionsFor", () => {
  const signOutTarget = async (r: Request) => {
    const redirect = authOptionsFor(r).callbacks?.redirect;
    if (!redirect) throw new Error("no redirect callback");
    return redirect({ url: "/signin", baseUrl: "http://localhost:3000" });
  };

  it("without NEXTAUTH_URL sends sign-out to /signin on the request's own host", async () => {
    delete process.env.NEXTAUTH_URL;
    expect(await signOutTarget(req("http://127.0.0.1:3000/api/auth/signout", { host: "127.0.0.1:3000" }))).toBe("http://127.0.0.1:3000/signin");
    expect(await signOutTarget(req("http://localhost:3000/api/auth/signout", { host: "box.lan:3000" }))).toBe("http://box.lan:3000/signin");
  });

  it("with NEXTAUTH_URL uses that origin whatever the request's host", async () => {
    process.env.NEXTAUTH_URL = "https://flotilla.example/";
    expect(await signOutTarget(req("http://127.0.0.1:3000/api/auth/signout", { host: "127.0.0.1:3000" }))).toBe("https://flotilla.example/signin");
  });
});
