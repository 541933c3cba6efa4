import { sql } from "drizzle-orm";
import { encode } from "next-auth/jwt";
import { beforeAll, describe, expect, it } from "vitest";
import { GET as listThreads } from "@/app/api/threads/route";
import { DELETE as revokeToken } from "@/app/api/tokens/[tokenId]/route";
import { GET as listTokens, POST as createToken } from "@/app/api/tokens/route";
import { authenticate } from "@/server/auth/authenticate";
import { hashLoad, hashPassword, HASH_CONCURRENCY } from "@/server/auth/password";
import { authOptions, RATE_LIMITED_PREFIX } from "@/server/auth/options";
import { listSessions, signOutEverywhere } from "@/server/auth/sessions";
import { makeUser, params, request, TEST_SECRET, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/** Sign-in limits, sessions that can end, and tokens that can be revoked or expire. */

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
});

type Authorize = (credentials: Record<string, string>, req: { headers: Record<string, string> }) => Promise<unknown>;
const authorize = (authOptions.providers[0] as unknown as { options: { authorize: Authorize } }).options.authorize;
const signIn = (email: string, password: string, address = "10.1.1.1") =>
  authorize({ email, password }, { headers: { "x-flotilla-client-address": address, "user-agent": "vitest" } });

async function cookieFor(user: { id: string; email: string }, password: string): Promise<string> {
  const signed = (await signIn(user.email, password)) as { id: string; sid: string; sv: number };
  const jwt = await encode({ token: { sub: signed.id, email: user.email, sid: signed.sid, sv: signed.sv }, secret: TEST_SECRET });
  return `next-auth.session-token=${jwt}`;
}

describe("sign-in limits", () => {
  it("after 10 failed sign-ins for one email, even the right password is refused until the window passes", async () => {
    const user = await makeUser(t.db, "locked");
    for (let i = 0; i < 10; i++) expect(await signIn(user.email, `wrong password ${i}`, `10.2.0.${i}`)).toBeNull();
    const started = Date.now();
    const err = (await signIn(user.email, user.password, "10.2.1.1").catch((e: Error) => e)) as Error;
    expect(err).toBeInstanceOf(Error);
    expect(err.message.startsWith(RATE_LIMITED_PREFIX)).toBe(true);
    expect(err.message.startsWith(`${RATE_LIMITED_PREFIX}email:`)).toBe(true);
    const retryAt = new Date(err.message.slice(`${RATE_LIMITED_PREFIX}email:`.length)).getTime();
    // About 15 minutes from the first failure.
    expect(retryAt - started).toBeGreaterThan(14 * 60_000);
    expect(retryAt - started).toBeLessThanOrEqual(15 * 60_000);
    // Shared in PostgreSQL: any web process sees the same count.
    const [row] = await t.db.execute<{ points: number }>(sql`select points from auth_rate_limits where key = ${`signin_email:${user.email}`}`);
    expect(row!.points).toBeGreaterThanOrEqual(11);

    // When the window has passed, the right password works again and clears the count.
    await t.db.execute(sql`update auth_rate_limits set expire = 0 where key = ${`signin_email:${user.email}`}`);
    expect(await signIn(user.email, user.password)).toMatchObject({ id: user.id });
  }, 120_000);

  it("a success refunds no failure: alternating still locks the email after 10 failures; other emails are unaffected", async () => {
    const user = await makeUser(t.db, "alternating");
    const other = await makeUser(t.db, "other");
    for (let i = 0; i < 10; i++) {
      expect(await signIn(user.email, "wrong password", `10.4.0.${i}`)).toBeNull();
      if (i < 9) expect(await signIn(user.email, user.password, `10.4.1.${i}`)).toMatchObject({ id: user.id });
    }
    const err = (await signIn(user.email, user.password, "10.4.2.1").catch((e: Error) => e)) as Error;
    expect(err.message.startsWith(`${RATE_LIMITED_PREFIX}email:`)).toBe(true);
    expect(await signIn(other.email, other.password, "10.4.2.1")).toMatchObject({ id: other.id });
  }, 120_000);

  it("concurrent guesses cannot slip past the limit", async () => {
    const user = await makeUser(t.db, "burst");
    const results = await Promise.allSettled(Array.from({ length: 16 }, (_, i) => signIn(user.email, `guess ${i}`, `10.3.0.${i}`)));
    expect(results.filter((r) => r.status === "rejected")).toHaveLength(6);
  });

  it("never runs more than HASH_CONCURRENCY scrypt hashes at once", async () => {
    let peak = 0;
    const timer = setInterval(() => (peak = Math.max(peak, hashLoad().running)), 1);
    await Promise.all(Array.from({ length: 8 }, (_, i) => hashPassword(`password ${i}`)));
    clearInterval(timer);
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(HASH_CONCURRENCY);
    expect(hashLoad()).toEqual({ running: 0, waiting: 0, admitted: 0 });
  });
});

describe("sessions", () => {
  it("a session ends at its next request after sign-out everywhere (version raised, rows gone)", async () => {
    const user = await makeUser(t.db, "everywhere");
    const a = await cookieFor(user, user.password);
    const b = await cookieFor(user, user.password);
    expect(await authenticate(request("/api/threads", { cookie: a }))).toMatchObject({ userId: user.id });
    expect(await listSessions(t.db, { userId: user.id })).toHaveLength(2);
    expect(await signOutEverywhere(t.db, user.id)).toBe(2);
    for (const cookie of [a, b]) {
      expect(await authenticate(request("/api/threads", { cookie }))).toBeNull();
      expect((await listThreads(request("/api/threads", { cookie }), undefined)).status).toBe(401);
    }
    // A new sign-in works again.
    expect(await authenticate(request("/api/threads", { cookie: await cookieFor(user, user.password) }))).toMatchObject({ userId: user.id });
  });

  it("a JWT without a live session row (signed out, or minted before sessions existed) is refused", async () => {
    const user = await makeUser(t.db, "nosid");
    const jwt = await encode({ token: { sub: user.id, email: user.email }, secret: TEST_SECRET });
    expect(await authenticate(request("/api/threads", { cookie: `next-auth.session-token=${jwt}` }))).toBeNull();
  });
});

describe("tokens API", () => {
  it("creates (shown once), lists without the token, revokes; a revoked token answers 401 at once", async () => {
    const user = await makeUser(t.db, "tokens");
    const cookie = await cookieFor(user, user.password);
    const created = await createToken(request("/api/tokens", { cookie, body: { name: "ci", expires_in_days: 30 } }), undefined);
    expect(created.status).toBe(201);
    const body = await created.json();
    expect(body).toMatchObject({ id: expect.any(String), name: "ci", token: expect.stringMatching(/^flt_/), expired: false });
    expect(new Date(body.expires_at).getTime() - Date.now()).toBeGreaterThan(29 * 86_400_000);

    const listed = await (await listTokens(request("/api/tokens", { bearer: body.token }), undefined)).json();
    expect(listed.tokens.map((x: { id: string }) => x.id)).toContain(body.id);
    expect(JSON.stringify(listed)).not.toContain(body.token);

    // Another user cannot revoke it (404), and nothing changes.
    const stranger = await makeUser(t.db, "stranger");
    const strangerCookie = await cookieFor(stranger, stranger.password);
    const denied = await revokeToken(request(`/api/tokens/${body.id}`, { method: "DELETE", cookie: strangerCookie }), params({ tokenId: body.id }));
    expect(denied.status).toBe(404);
    expect((await listThreads(request("/api/threads", { bearer: body.token }), undefined)).status).toBe(200);

    const revoked = await revokeToken(request(`/api/tokens/${body.id}`, { method: "DELETE", cookie }), params({ tokenId: body.id }));
    expect(revoked.status).toBe(204);
    const after = await listThreads(request("/api/threads", { bearer: body.token }), undefined);
    expect(after.status).toBe(401);
    expect(await after.json()).toEqual({ error: { code: "unauthorized", message: expect.any(String) } });
  });

  it("an expired token answers 401", async () => {
    const user = await makeUser(t.db, "expiry");
    const cookie = await cookieFor(user, user.password);
    const body = await (await createToken(request("/api/tokens", { cookie, body: { name: "short", expires_in_days: 1 } }), undefined)).json();
    expect((await listThreads(request("/api/threads", { bearer: body.token }), undefined)).status).toBe(200);
    await t.db.execute(sql`update api_tokens set expires_at = now() - interval '1 second' where id = ${body.id}`);
    expect((await listThreads(request("/api/threads", { bearer: body.token }), undefined)).status).toBe(401);
    const listed = await (await listTokens(request("/api/tokens", { cookie }), undefined)).json();
    expect(listed.tokens.find((x: { id: string }) => x.id === body.id)).toMatchObject({ expired: true });
  });

  it.each([
    [{ name: "" }, /^name: /],
    [{ name: "x", expires_in_days: 0 }, /^expires_in_days: /],
    [{ name: "x", expires_in_days: 1.5 }, /^expires_in_days: /],
    [{ name: "x", extra: true }, /extra/],
    [{}, /^name: /],
  ])("rejects %j with 400 naming the field and writes nothing", async (bad, message) => {
    const user = await makeUser(t.db, "badtoken");
    const cookie = await cookieFor(user, user.password);
    const res = await createToken(request("/api/tokens", { cookie, body: bad }), undefined);
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ code: "validation_failed", message: expect.stringMatching(message) });
    expect((await (await listTokens(request("/api/tokens", { cookie }), undefined)).json()).tokens).toEqual([]);
  });
});
