import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeUser, uniqueEmail, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * Sign-in under abuse, black-box over real sockets: each client connects from its own 127.0.0.x
 * address, the address the limits see (the TCP peer). Smart lockout, no refunds on success, the
 * per-address lock, and the bounded password-hash queue (429 busy at once, nothing written).
 */

let t: TestDatabase;
let server: WebServer;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url, { FLOTILLA__AUTH__REGISTRATION: "open" });
  server = await startWebServer();
});

afterAll(async () => {
  await server?.close();
});

type Outcome = "ok" | "wrong" | "busy" | `locked:${string}`;

/** A browser at `from`: next-auth's CSRF cookie and token, then credential posts. */
async function browserAt(from: string) {
  const csrf = await send(server, "/api/auth/csrf", { from });
  expect(csrf.status).toBe(200);
  const cookie = ([] as string[])
    .concat(csrf.headers["set-cookie"] ?? [])
    .map((c) => c.split(";")[0])
    .join("; ");
  const { csrfToken } = JSON.parse(csrf.body) as { csrfToken: string };
  return async function signIn(email: string, password: string): Promise<{ outcome: Outcome; ms: number; body: string }> {
    const started = Date.now();
    const res = await send(server, "/api/auth/callback/credentials", {
      from,
      headers: { cookie, "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ csrfToken, email, password, json: "true" }).toString(),
      timeoutMs: 200_000, // a queue of 32 scrypt hashes on a loaded CI machine
    });
    const ms = Date.now() - started;
    if (res.status === 429) return { outcome: "busy", ms, body: res.body };
    const error = new URL(JSON.parse(res.body).url, "http://x").searchParams.get("error");
    if (res.status === 200 && !error) {
      expect([res.headers["set-cookie"]].flat().join()).toContain("next-auth.session-token=");
      return { outcome: "ok", ms, body: res.body };
    }
    if (error === "CredentialsSignin") return { outcome: "wrong", ms, body: res.body };
    const locked = /^rate_limited:(\w+):/.exec(error ?? "");
    if (locked) return { outcome: `locked:${locked[1]}`, ms, body: res.body };
    throw new Error(`unexpected sign-in answer ${res.status}: ${res.body}`);
  };
}

async function points(key: string): Promise<number> {
  const [row] = await t.db.execute<{ points: number }>(sql`select points from auth_rate_limits where key = ${key}`);
  return row?.points ?? 0;
}

describe("smart lockout", () => {
  it("10 failures from one address lock the email for unfamiliar addresses; the owner's familiar address still signs in", async () => {
    const owner = await makeUser(t.db, "smart");
    const home = await browserAt("127.0.0.7");
    expect((await home(owner.email, owner.password)).outcome).toBe("ok"); // 127.0.0.7 becomes familiar

    const attacker = await browserAt("127.0.0.5");
    for (let i = 0; i < 10; i++) expect((await attacker(owner.email, `guess ${i}`)).outcome).toBe("wrong");
    expect((await attacker(owner.email, owner.password)).outcome).toBe("locked:email");

    const elsewhere = await browserAt("127.0.0.6");
    expect((await elsewhere(owner.email, owner.password)).outcome).toBe("locked:email");

    expect((await home(owner.email, owner.password)).outcome).toBe("ok");
    // The familiar address has its own count: ten of its own failures lock it too.
    for (let i = 0; i < 10; i++) expect((await home(owner.email, `typo ${i}`)).outcome).toBe("wrong");
    expect((await home(owner.email, owner.password)).outcome).toBe("locked:email_here");
  }, 240_000);

  it("alternating successes and failures does not reset the email's count", async () => {
    const owner = await makeUser(t.db, "alternate");
    for (let i = 0; i < 10; i++) {
      const attempt = await browserAt(`127.0.1.${i + 1}`);
      expect((await attempt(owner.email, `guess ${i}`)).outcome).toBe("wrong");
      // A success from another new address between failures: it refunds nothing.
      if (i < 9) expect((await (await browserAt(`127.0.2.${i + 1}`))(owner.email, owner.password)).outcome).toBe("ok");
    }
    expect((await (await browserAt("127.0.3.1"))(owner.email, owner.password)).outcome).toBe("locked:email");
  }, 240_000);
});

describe("per client address", () => {
  it("100 failed sign-ins lock that address (a success in between refunds none); other addresses are unaffected", async () => {
    const someone = await makeUser(t.db, "addr");
    const target = uniqueEmail("nobody"); // after 10 failures its email lock answers without hashing
    const flood = await browserAt("127.0.0.8");
    for (let i = 0; i < 50; i++) expect((await flood(target, "guess")).outcome).toMatch(/^(wrong|locked:email)$/);
    expect((await flood(someone.email, someone.password)).outcome).toBe("ok");
    for (let i = 0; i < 50; i++) expect((await flood(target, "guess")).outcome).toMatch(/^(wrong|locked:email)$/);
    expect(await points("signin_addr:127.0.0.8")).toBe(100);
    expect((await flood(someone.email, someone.password)).outcome).toBe("locked:address");
    expect((await (await browserAt("127.0.0.9"))(someone.email, someone.password)).outcome).toBe("ok");
  }, 240_000);
});

describe("the password-hash queue", () => {
  it("beyond 32 sign-ins in flight, the rest answer 429 busy at once and count nothing", async () => {
    const from = "127.0.0.20";
    const signIn = await browserAt(from);
    const results = await Promise.all(Array.from({ length: 48 }, (_, i) => signIn(uniqueEmail(`flood${i}`), "guess")));
    const busy = results.filter((r) => r.outcome === "busy");
    const checked = results.filter((r) => r.outcome !== "busy");
    expect(busy.length).toBeGreaterThan(0);
    expect(checked.length).toBeGreaterThanOrEqual(32);
    expect(checked.every((r) => r.outcome === "wrong")).toBe(true);
    expect(JSON.parse(busy[0]!.body)).toEqual({ error: { code: "busy", message: expect.stringMatching(/^busy/) } });
    // Refused before any hashing: each busy answer came back before the checked ones were done.
    expect(Math.max(...busy.map((r) => r.ms))).toBeLessThan(Math.max(...checked.map((r) => r.ms)));
    // Nothing written for a busy answer: the address counted only the checked attempts.
    expect(await points(`signin_addr:${from}`)).toBe(checked.length);
  }, 240_000);

  it("registration too: beyond 32 in flight, 429 busy and no account", async () => {
    await makeUser(t.db, "first"); // open registration after the first account
    const before = (await t.db.execute<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n;
    const results = await Promise.all(
      Array.from({ length: 48 }, (_, i) =>
        send(server, "/api/register", {
          from: `127.0.4.${i + 1}`,
          json: { email: uniqueEmail(`reg${i}`), password: "flood password" },
          timeoutMs: 200_000,
        }),
      ),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
    expect(statuses.every((s) => s === 201 || s === 429)).toBe(true);
    const after = (await t.db.execute<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n;
    expect(after - before).toBe(statuses.filter((s) => s === 201).length);
    const busy = results.find((r) => r.status === 429)!;
    expect(JSON.parse(busy.body).error.code).toBe("busy");
  }, 240_000);
});
