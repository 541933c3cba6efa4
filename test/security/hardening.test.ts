import { Writable } from "node:stream";
import pino from "pino";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { safeCallbackUrl } from "@/app/(auth)/safe-callback";
import { NextRequest } from "next/server";
import { POST as authPost } from "@/app/api/auth/[...nextauth]/route";
import { GET as health } from "@/app/api/health/route";
import { GET as metrics } from "@/app/api/metrics/route";
import { createDatabase } from "@/server/db/client";
import { REDACT_PATHS } from "@/server/log";
import { logError as redactError } from "@/server/errors";
import { makeUser, request, sessionCookie, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { createApiToken } from "@/server/auth/tokens";

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
});

describe("sign-in callbackUrl", () => {
  it.each([
    "/%09/evil.com",
    "/%0a/evil.com",
    "/\t/evil.com",
    "//evil.com",
    "//evil",
    "/\\evil",
    "/%5Cevil",
    "/%2F/evil.com",
    "/%252F%252Fevil.com",
    "https://evil.com/",
    "javascript:alert(1)",
    "evil.com",
    "/%",
    "",
  ])("sends %j home", (value) => {
    expect(safeCallbackUrl(value)).toBe("/");
  });

  it.each([
    ["/", "/"],
    ["/threads/abc", "/threads/abc"],
    ["/threads/abc?tab=1#x", "/threads/abc?tab=1#x"],
    ["/workers", "/workers"],
  ])("keeps the same-origin path %j", (value, expected) => {
    expect(safeCallbackUrl(value)).toBe(expected);
    expect(safeCallbackUrl([value, "//evil"])).toBe(expected);
  });
});

describe("/api/health", () => {
  it("answers 503 without the database's error text", async () => {
    const { getDatabase } = await import("@/server/db/client");
    // Point the web process's handle at a database that is not there, then back.
    const swap = async (url: string) => {
      await getDatabase().close();
      (globalThis as { __flotillaDb?: unknown }).__flotillaDb = undefined;
      process.env.DATABASE_URL = url;
    };
    await swap("postgres://nobody:secret-password@127.0.0.1:1/nowhere");
    try {
      const res = await health();
      expect(res.status).toBe(503);
      const text = await res.text();
      expect(JSON.parse(text)).toEqual({ status: "error", database: "unavailable" });
      expect(text).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|secret-password|nobody/);
    } finally {
      await swap(t.url);
    }
    expect((await health()).status).toBe(200);
  });
});

describe("log redaction", () => {
  it("logs a failed query without its bound parameters", async () => {
    const db = createDatabase(t.url, { max: 1 });
    const hash = "scrypt$32768$8$1$c2FsdA$SECRET-HASH-VALUE";
    const err = await db.db.execute(sql`select ${hash}::int`).catch((e: unknown) => e);
    await db.close();
    const lines: string[] = [];
    const logger = pino(
      { redact: { paths: REDACT_PATHS, censor: "[redacted]" }, serializers: { err: redactError } },
      new Writable({
        write(chunk, _enc, done) {
          lines.push(String(chunk));
          done();
        },
      }),
    );
    logger.error({ err, params: [hash], user: { password: "hunter22", passwordHash: hash } }, "query failed");
    const line = lines.join("");
    expect(line).toContain("Failed query");
    expect(line).toContain("22P02"); // the driver's SQLSTATE is kept
    expect(line).not.toContain("SECRET-HASH-VALUE");
    expect(line).not.toContain("hunter22");
  });
});

describe("/api/metrics is for the admin", () => {
  it("answers 403 to a signed-in user who is not the admin, 200 to the admin", async () => {
    const admin = await makeUser(t.db, "admin"); // first account of this database
    const other = await makeUser(t.db, "member");
    const otherToken = await createApiToken(t.db, { userId: other.id });
    const denied = await metrics(request("/api/metrics", { bearer: otherToken }), undefined as never);
    expect(denied.status).toBe(403);
    expect((await denied.json()).error.code).toBe("forbidden");
    expect((await metrics(request("/api/metrics", { cookie: await sessionCookie(other) }), undefined as never)).status).toBe(403);
    expect((await metrics(request("/api/metrics", { cookie: await sessionCookie(admin) }), undefined as never)).status).toBe(200);
  });
});

describe("/api/auth/* body limit", () => {
  it("answers 413 JSON to an oversized sign-in body before next-auth reads it", async () => {
    const req = new NextRequest("http://localhost:3000/api/auth/callback/credentials", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `email=a%40b.c&password=${"x".repeat(20_000)}`,
    });
    const res = await authPost(req, { params: Promise.resolve({ nextauth: ["callback", "credentials"] }) });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: { code: "payload_too_large", message: expect.stringMatching(/exceeds 8192 bytes/) } });
  });
});
