import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as changePassword } from "@/app/api/account/password/route";
import { GET as listThreads } from "@/app/api/threads/route";
import { DELETE as revokeToken } from "@/app/api/tokens/[tokenId]/route";
import { GET as listTokens, POST as createToken } from "@/app/api/tokens/route";
import { verifyCredentials } from "@/server/auth/users";
import { makeUser, params, request, sessionCookie, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";

/** Issue 24: tokens expire by default and never outlive the token that made them; password change. */

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
});

const DAY = 86_400_000;

type Auth = { cookie: string } | { bearer: string };

async function create(auth: Auth, body: unknown): Promise<Response> {
  return createToken(request("/api/tokens", { ...auth, body }), undefined);
}

async function tokensOf(cookie: string): Promise<Array<{ id: string; expires_at: string | null }>> {
  return (await (await listTokens(request("/api/tokens", { cookie }), undefined)).json()).tokens;
}

async function status(auth: Auth): Promise<number> {
  return (await listThreads(request("/api/threads", auth), undefined)).status;
}

async function changeTo(auth: Auth, body: unknown): Promise<Response> {
  return changePassword(request("/api/account/password", { ...auth, body }), undefined);
}

describe("token expiry", () => {
  it("a new token lasts 90 days unless asked otherwise", async () => {
    const user = await makeUser(t.db, "default");
    const cookie = await sessionCookie(user);
    const res = await create({ cookie }, { name: "default" });
    expect(res.status).toBe(201);
    const body = await res.json();
    expect(Math.abs(new Date(body.expires_at).getTime() - (Date.now() + 90 * DAY))).toBeLessThan(60_000);
  });

  it("refuses 0, 366 and a string, naming expires_in_days, and writes nothing", async () => {
    const user = await makeUser(t.db, "range");
    const cookie = await sessionCookie(user);
    for (const days of [0, 366, "x"]) {
      const res = await create({ cookie }, { name: "bad", expires_in_days: days });
      expect(res.status, `expires_in_days ${days}`).toBe(400);
      expect((await res.json()).error.message).toMatch(/^expires_in_days: /);
    }
    expect(await tokensOf(cookie)).toEqual([]);
    // 365 is the longest.
    expect((await create({ cookie }, { name: "year", expires_in_days: 365 })).status).toBe(201);
  });

  it("never expires (null) only from a browser session, not with a bearer token", async () => {
    const user = await makeUser(t.db, "never");
    const cookie = await sessionCookie(user);
    const forever = await create({ cookie }, { name: "forever", expires_in_days: null });
    expect(forever.status).toBe(201);
    const made = await forever.json();
    expect(made.expires_at).toBeNull();

    // Not even a token that itself never expires may make another one.
    const res = await create({ bearer: made.token }, { name: "copy", expires_in_days: null });
    expect(res.status).toBe(400);
    expect((await res.json()).error).toMatchObject({ code: "validation_failed", message: expect.stringMatching(/^expires_in_days: .*browser session/) });
    expect(await tokensOf(cookie)).toHaveLength(1);
  });

  it("a token made with a bearer token never outlives it", async () => {
    const user = await makeUser(t.db, "capped");
    const cookie = await sessionCookie(user);
    const maker = await (await create({ cookie }, { name: "one day", expires_in_days: 1 })).json();
    const [makerRow] = await t.db.execute<{ expires_at: string }>(sql`select expires_at::text from api_tokens where id = ${maker.id}`);

    for (const body of [{ name: "year", expires_in_days: 365 }, { name: "default" }]) {
      const res = await create({ bearer: maker.token }, body);
      expect(res.status).toBe(201);
      const child = await res.json();
      const [row] = await t.db.execute<{ expires_at: string }>(sql`select expires_at::text from api_tokens where id = ${child.id}`);
      expect(row!.expires_at).toBe(makerRow!.expires_at);
    }
    // A shorter request stays shorter.
    const hour = await (await create({ bearer: maker.token }, { name: "short", expires_in_days: 1 })).json();
    expect(new Date(hour.expires_at).getTime()).toBeLessThanOrEqual(new Date(maker.expires_at).getTime());

    // When the maker expires, so do the tokens it made.
    await t.db.execute(sql`update api_tokens set expires_at = now() + interval '2 seconds' where id = ${maker.id}`);
    const late = await (await create({ bearer: maker.token }, { name: "late", expires_in_days: 90 })).json();
    expect(await status({ bearer: late.token })).toBe(200);
    await t.db.execute(sql`update api_tokens set expires_at = now() - interval '1 second' where id in (${maker.id}, ${late.id})`);
    expect(await status({ bearer: maker.token })).toBe(401);
    expect(await status({ bearer: late.token })).toBe(401);
  });

  it("expired and revoked tokens answer 401 at once", async () => {
    const user = await makeUser(t.db, "dead");
    const cookie = await sessionCookie(user);
    const a = await (await create({ cookie }, { name: "a" })).json();
    const b = await (await create({ cookie }, { name: "b" })).json();
    expect(await status({ bearer: a.token })).toBe(200);
    await t.db.execute(sql`update api_tokens set expires_at = now() where id = ${a.id}`);
    expect(await status({ bearer: a.token })).toBe(401);
    expect((await create({ bearer: a.token }, { name: "from expired" })).status).toBe(401);
    expect((await revokeToken(request(`/api/tokens/${b.id}`, { method: "DELETE", cookie }), params({ tokenId: b.id }))).status).toBe(204);
    expect(await status({ bearer: b.token })).toBe(401);
  });
});

describe("password change", () => {
  async function setup(prefix: string) {
    const user = await makeUser(t.db, prefix);
    const mine = await sessionCookie(user);
    const other = await sessionCookie(user);
    const token = await (await create({ cookie: mine }, { name: "script" })).json();
    return { user, mine, other, token: token.token as string };
  }

  it("refuses a wrong current password naming the field, and nothing changes", async () => {
    const { user, mine, other, token } = await setup("wrong");
    const [before] = await t.db.execute<{ h: string }>(sql`select password_hash as h from users where id = ${user.id}`);
    const res = await changeTo({ cookie: mine }, { current_password: "not my password", new_password: "a brand new password" });
    expect(res.status).toBe(403);
    expect((await res.json()).error).toMatchObject({ code: "forbidden", message: expect.stringMatching(/^current_password: /) });
    const [after] = await t.db.execute<{ h: string }>(sql`select password_hash as h from users where id = ${user.id}`);
    expect(after!.h).toBe(before!.h);
    for (const auth of [{ cookie: mine }, { cookie: other }, { bearer: token }]) expect(await status(auth)).toBe(200);
    expect(await verifyCredentials(t.db, { email: user.email, password: user.password })).toMatchObject({ id: user.id });
  });

  it.each([
    [{ current_password: "correct horse battery", new_password: "short" }, /^new_password: /],
    [{ current_password: "correct horse battery", new_password: "correct horse battery" }, /^new_password: /],
    [{ new_password: "a brand new password" }, /^current_password: /],
    [{ current_password: "correct horse battery", new_password: 12345678 }, /^new_password: /],
  ])("refuses %j naming the field, and nothing changes", async (body, message) => {
    const { user, mine, other } = await setup("badnew");
    const res = await changeTo({ cookie: mine }, body);
    expect(res.status).toBe(400);
    expect((await res.json()).error.message).toMatch(message);
    expect(await status({ cookie: other })).toBe(200);
    expect(await verifyCredentials(t.db, { email: user.email, password: user.password })).toMatchObject({ id: user.id });
  });

  it("changes the password and ends every other session; this session and tokens keep working", async () => {
    const { user, mine, other, token } = await setup("change");
    const res = await changeTo({ cookie: mine }, { current_password: user.password, new_password: "a brand new password" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ other_sessions_ended: 1 });
    expect(await status({ cookie: other })).toBe(401);
    expect(await status({ cookie: mine })).toBe(200);
    expect(await status({ bearer: token })).toBe(200);
    expect(await verifyCredentials(t.db, { email: user.email, password: user.password })).toBeNull();
    expect(await verifyCredentials(t.db, { email: user.email, password: "a brand new password" })).toMatchObject({ id: user.id });
    // The old password no longer changes it.
    expect((await changeTo({ cookie: mine }, { current_password: user.password, new_password: "yet another password" })).status).toBe(403);
  });

  it("made with a bearer token, it ends every browser session", async () => {
    const { user, mine, other, token } = await setup("bearer");
    const res = await changeTo({ bearer: token }, { current_password: user.password, new_password: "a brand new password" });
    expect(await res.json()).toEqual({ other_sessions_ended: 2 });
    for (const cookie of [mine, other]) expect(await status({ cookie })).toBe(401);
    expect(await status({ bearer: token })).toBe(200);
  });

  it("after 10 wrong current passwords, even the right one is refused for a while (no guessing through a stolen session)", async () => {
    const { user, mine, other } = await setup("guess");
    const guesses = await Promise.all(
      Array.from({ length: 12 }, (_, i) => changeTo({ cookie: mine }, { current_password: `guess ${i}`, new_password: "a brand new password" })),
    );
    expect(guesses.map((r) => r.status).sort()).toEqual([...Array(10).fill(403), 429, 429]);
    const res = await changeTo({ cookie: mine }, { current_password: user.password, new_password: "a brand new password" });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(14 * 60);
    expect(await status({ cookie: other })).toBe(200);
    expect(await verifyCredentials(t.db, { email: user.email, password: user.password })).toMatchObject({ id: user.id });
    // When the window has passed, the right password works again.
    await t.db.execute(sql`update auth_rate_limits set expire = 0 where key = ${`password_change:${user.id}`}`);
    expect((await changeTo({ cookie: mine }, { current_password: user.password, new_password: "a brand new password" })).status).toBe(200);
  }, 120_000);

  it("needs a signed-in caller", async () => {
    const res = await changeTo({ bearer: "flt_nope" }, { current_password: "x", new_password: "a brand new password" });
    expect(res.status).toBe(401);
  });
});
