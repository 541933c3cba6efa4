import { createHash } from "node:crypto";
import { eq, sql } from "drizzle-orm";
import { encode } from "next-auth/jwt";
import { beforeAll, describe, expect, it } from "vitest";
import { authenticate, requireUser } from "@/server/auth/authenticate";
import { hashPassword, verifyPassword } from "@/server/auth/password";
import { createApiToken, userIdForToken } from "@/server/auth/tokens";
import { createUser, verifyCredentials } from "@/server/auth/users";
import { apiTokens, users } from "@/server/db/schema";
import { AppError } from "@/server/errors";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { makeUser, ORIGIN, request, sessionCookie, TEST_SECRET, uniqueEmail, useSuiteEnv } from "../chat/support";

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
});

describe("password hashing (scrypt)", () => {
  it("stores scrypt$N$r$p$salt$hash with a fresh salt and verifies only the right password", async () => {
    const a = await hashPassword("s3cret-passphrase");
    const b = await hashPassword("s3cret-passphrase");
    expect(a).toMatch(/^scrypt\$32768\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{43}$/);
    expect(a).not.toBe(b); // salted
    expect(await verifyPassword("s3cret-passphrase", a)).toBe(true);
    expect(await verifyPassword("s3cret-passphrase", b)).toBe(true);
    expect(await verifyPassword("s3cret-passphrasE", a)).toBe(false);
    expect(await verifyPassword("", a)).toBe(false);
  });

  it("rejects malformed or tampered stored values instead of throwing", async () => {
    const good = await hashPassword("pw-12345678");
    const [, , r, p, salt, hash] = good.split("$");
    for (const stored of [
      "",
      "plain-text",
      `bcrypt$32768$8$1$${salt}$${hash}`,
      `scrypt$1073741824$${r}$${p}$${salt}$${hash}`, // absurd memory cost
      `scrypt$1000$${r}$${p}$${salt}$${hash}`, // not a power of two
      `scrypt$32768$${r}$${p}$$${hash}`, // empty salt
      `scrypt$32768$${r}$${p}$${salt}$AAAA`, // truncated hash
      `scrypt$32768$${r}$${p}$${salt}$${hash}$extra`,
    ]) {
      expect(await verifyPassword("pw-12345678", stored), stored).toBe(false);
    }
  });
});

describe("users", () => {
  it("creates a user with a normalized email and a hashed password", async () => {
    const email = uniqueEmail("Mixed.Case").toUpperCase();
    const user = await createUser(t.db, { email: `  ${email} `, password: "long enough pw" });
    expect(user.email).toBe(email.toLowerCase());
    const [row] = await t.db.select().from(users).where(eq(users.id, user.id));
    expect(row.passwordHash.startsWith("scrypt$")).toBe(true);
    expect(row.passwordHash).not.toContain("long enough pw");
  });

  it("answers conflict for a taken email, whatever its case, and writes nothing", async () => {
    const u = await makeUser(t.db, "dup");
    const before = await t.db.select({ n: sql<number>`count(*)::int` }).from(users);
    const err = await createUser(t.db, { email: u.email.toUpperCase(), password: "another password" }).catch((e) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err.code).toBe("conflict");
    const after = await t.db.select({ n: sql<number>`count(*)::int` }).from(users);
    expect(after[0].n).toBe(before[0].n);
  });

  it("lets exactly one of two concurrent sign-ups with one email win", async () => {
    const email = uniqueEmail("race");
    const results = await Promise.allSettled(
      Array.from({ length: 4 }, () => createUser(t.db, { email, password: "race password 1" })),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(rejected).toHaveLength(3);
    for (const r of rejected) expect((r.reason as AppError).code).toBe("conflict");
  });

  it.each([
    [{ email: "not-an-email", password: "long enough pw" }, /^email: /],
    [{ email: "", password: "long enough pw" }, /^email: /],
    [{ email: `${"a".repeat(250)}@example.com`, password: "long enough pw" }, /^email: .*254/],
    [{ email: "ok@example.com", password: "short" }, /^password: .*at least 8/],
    [{ email: "ok@example.com", password: "x".repeat(201) }, /^password: .*at most 200/],
  ])("validates %j", async (input, message) => {
    const err = await createUser(t.db, input).catch((e) => e);
    expect(err).toBeInstanceOf(AppError);
    expect(err.code).toBe("validation_failed");
    expect(err.message).toMatch(message);
  });

  it("verifies credentials", async () => {
    const u = await makeUser(t.db, "creds");
    expect(await verifyCredentials(t.db, { email: u.email, password: u.password })).toEqual({ id: u.id, email: u.email });
    expect(await verifyCredentials(t.db, { email: u.email.toUpperCase(), password: u.password })).toEqual({ id: u.id, email: u.email });
    expect(await verifyCredentials(t.db, { email: u.email, password: `${u.password}!` })).toBeNull();
    expect(await verifyCredentials(t.db, { email: uniqueEmail("nobody"), password: u.password })).toBeNull();
    expect(await verifyCredentials(t.db, { email: undefined, password: undefined })).toBeNull();
    expect(await verifyCredentials(t.db, { email: u.email, password: 12345678 })).toBeNull();
  });
});

describe("API tokens", () => {
  it("returns flt_ tokens and stores only their SHA-256", async () => {
    const u = await makeUser(t.db, "tok");
    const token = await createApiToken(t.db, { userId: u.id, name: "laptop" });
    expect(token).toMatch(/^flt_[A-Za-z0-9_-]{43}$/);
    const rows = await t.db.select().from(apiTokens).where(eq(apiTokens.userId, u.id));
    expect(rows).toHaveLength(1);
    expect(rows[0].tokenHash).toBe(createHash("sha256").update(token).digest("hex"));
    expect(rows[0].name).toBe("laptop");
    const dump = JSON.stringify(await t.sql`select * from api_tokens`);
    expect(dump).not.toContain(token);
    expect(dump).not.toContain(token.slice(4));
  });

  it("resolves a token to its owner and nothing else", async () => {
    const u = await makeUser(t.db, "tok2");
    const token = await createApiToken(t.db, { userId: u.id });
    expect(await userIdForToken(t.db, token)).toBe(u.id);
    const [row] = await t.db.select().from(apiTokens).where(eq(apiTokens.userId, u.id));
    expect(row.lastUsedAt).toBeInstanceOf(Date);
    expect(await userIdForToken(t.db, `${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`)).toBeNull();
    expect(await userIdForToken(t.db, "flt_short")).toBeNull();
    expect(await userIdForToken(t.db, "")).toBeNull();
  });

  it("refuses tokens for unknown users", async () => {
    await expect(createApiToken(t.db, { userId: "00000000-0000-0000-0000-000000000000" })).rejects.toMatchObject({ code: "not_found" });
    await expect(createApiToken(t.db, { userId: "nope" })).rejects.toMatchObject({ code: "not_found" });
  });
});

describe("authenticate", () => {
  it("accepts a Bearer token without any cookie", async () => {
    const u = await makeUser(t.db, "bearer");
    const token = await createApiToken(t.db, { userId: u.id });
    expect(await authenticate(request("/api/threads", { bearer: token }))).toEqual({ userId: u.id });
  });

  it("judges a request that presents a bearer token by the token alone", async () => {
    const u = await makeUser(t.db, "both");
    const cookie = await sessionCookie(u);
    expect(await authenticate(request("/api/threads", { cookie, bearer: "flt_not-a-real-token" }))).toBeNull();
    expect(await authenticate(request("/api/threads", { cookie, headers: { authorization: "Basic abc" } }))).toBeNull();
  });

  it("accepts the next-auth session cookie and rejects forged or foreign ones", async () => {
    const u = await makeUser(t.db, "cookie");
    expect(await authenticate(request("/api/threads", { cookie: await sessionCookie(u) }))).toMatchObject({ userId: u.id });
    expect(await authenticate(request("/api/threads", { cookie: await sessionCookie(u, "some-other-secret-value") }))).toBeNull();
    expect(await authenticate(request("/api/threads", { cookie: "next-auth.session-token=garbage" }))).toBeNull();
    const expired = await encode({ token: { sub: u.id, email: u.email }, secret: TEST_SECRET, maxAge: -60 });
    expect(await authenticate(request("/api/threads", { cookie: `next-auth.session-token=${expired}` }))).toBeNull();
    expect(await authenticate(request("/api/threads"))).toBeNull();
  });

  it("ignores a valid session of a deleted account", async () => {
    const u = await makeUser(t.db, "gone");
    const cookie = await sessionCookie(u);
    await t.db.delete(users).where(eq(users.id, u.id));
    expect(await authenticate(request("/api/threads", { cookie }))).toBeNull();
  });

  it("rejects cross-site state-changing cookie requests with 403, but not Bearer or reads", async () => {
    const u = await makeUser(t.db, "csrf");
    const cookie = await sessionCookie(u);
    const token = await createApiToken(t.db, { userId: u.id });
    const evil = { origin: "https://evil.example" };
    await expect(
      authenticate(request("/api/threads", { method: "POST", cookie, body: {}, headers: evil })),
    ).rejects.toMatchObject({ code: "forbidden", status: 403 });
    await expect(
      authenticate(request("/api/threads", { method: "DELETE", cookie, headers: { "sec-fetch-site": "cross-site" } })),
    ).rejects.toMatchObject({ code: "forbidden" });
    await expect(
      authenticate(request("/api/threads", { method: "POST", cookie, body: {}, headers: { origin: "null" } })),
    ).rejects.toMatchObject({ code: "forbidden" });
    // Same origin, no Origin header at all (non-browser client), Bearer from anywhere, and reads pass.
    expect(await authenticate(request("/api/threads", { method: "POST", cookie, body: {}, headers: { origin: ORIGIN } }))).toMatchObject({ userId: u.id });
    expect(await authenticate(request("/api/threads", { method: "POST", bearer: token, body: {}, headers: evil }))).toEqual({ userId: u.id });
    expect(await authenticate(request("/api/threads", { cookie, headers: evil }))).toMatchObject({ userId: u.id });
    const noOrigin = new Request(`${ORIGIN}/api/threads`, { method: "POST", headers: { cookie, host: "localhost:3000" }, body: "{}" });
    expect(await authenticate(noOrigin)).toMatchObject({ userId: u.id });
  });

  it("requireUser answers 401 unauthorized", async () => {
    await expect(requireUser(request("/api/threads"))).rejects.toMatchObject({ code: "unauthorized", status: 401 });
  });
});
