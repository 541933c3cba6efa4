import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as register } from "@/app/api/register/route";
import { createInvite } from "@/server/auth/invites";
import { registerUser } from "@/server/auth/registration";
import { currentSetupCode } from "@/server/auth/setup-code";
import { createUser } from "@/server/auth/users";
import { getDatabase } from "@/server/db/client";
import { request, uniqueEmail, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { cli } from "./support";

/** auth.registration = invite (the default): the first account is the admin, everyone after needs a code. */

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url);
});

const userCount = async () => (await t.db.execute<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n;
const post = (body: unknown, address = "10.0.0.1") =>
  register(request("/api/register", { body, headers: { "x-flotilla-client-address": address } }), undefined);

describe("registration policy: invite", () => {
  it("makes the first account the admin with the setup code, then refuses anyone without a valid invite (403 JSON, nothing written)", async () => {
    const code = await currentSetupCode(t.db);
    const first = await post({ email: uniqueEmail("admin"), password: "admin password 1", setup_code: code });
    expect(first.status).toBe(201);
    const [admin] = await t.db.execute<{ is_admin: boolean }>(sql`select is_admin from users where id = ${(await first.json()).id}`);
    expect(admin!.is_admin).toBe(true);

    const before = await userCount();
    for (const body of [
      { email: uniqueEmail("nocode"), password: "second password" },
      { email: uniqueEmail("badcode"), password: "second password", invite_code: "inv_not-a-real-code" },
      { email: uniqueEmail("emptycode"), password: "second password", invite_code: "" },
    ]) {
      const res = await post(body);
      expect(res.status).toBe(403);
      const json = await res.json();
      expect(json).toEqual({ error: { code: "forbidden", message: expect.stringMatching(/invite code/) } });
    }
    expect(await userCount()).toBe(before);
  });

  it("accepts a code from `cli invite create` once (stored hashed), never twice, and never an expired one", async () => {
    const created = await cli(["invite", "create"], { DATABASE_URL: t.url });
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^inv_[A-Za-z0-9_-]{32}\n$/);
    const code = created.stdout.trim();
    const stored = await t.db.execute<{ code_hash: string }>(sql`select code_hash from invites`);
    expect(stored.some((r) => r.code_hash.includes(code) || r.code_hash === code)).toBe(false);

    const ok = await post({ email: uniqueEmail("invited"), password: "invited password", invite_code: code });
    expect(ok.status).toBe(201);
    const [row] = await t.db.execute<{ is_admin: boolean; used: boolean }>(
      sql`select u.is_admin, exists (select 1 from invites i where i.used_by = u.id) as used from users u where u.id = ${(await ok.json()).id}`,
    );
    expect(row).toEqual({ is_admin: false, used: true });

    const before = await userCount();
    const again = await post({ email: uniqueEmail("reuse"), password: "invited password", invite_code: code });
    expect(again.status).toBe(403);
    expect((await again.json()).error.message).toMatch(/already used or expired/);

    const old = await createInvite(t.db, { expiresInDays: 1 });
    await t.db.execute(sql`update invites set expires_at = now() - interval '1 second' where used_at is null`);
    expect((await post({ email: uniqueEmail("late"), password: "invited password", invite_code: old.code })).status).toBe(403);
    expect(await userCount()).toBe(before);
  });

  it("a code is spent by exactly one of two registrations at once", async () => {
    const { code } = await createInvite(t.db);
    const results = await Promise.all(
      [0, 1].map((i) => post({ email: uniqueEmail(`race${i}`), password: "racing password", invite_code: code }, `10.0.1.${i}`)),
    );
    expect(results.map((r) => r.status).sort()).toEqual([201, 403]);
  });

  it("a conflicting email does not spend the code", async () => {
    const { code } = await createInvite(t.db);
    const taken = (await createUser(t.db, { email: uniqueEmail("taken"), password: "taken password" })).email;
    expect((await post({ email: taken, password: "another password", invite_code: code })).status).toBe(409);
    expect((await post({ email: uniqueEmail("after"), password: "another password", invite_code: code })).status).toBe(201);
  });

  it("closed: nobody registers over HTTP, the CLI still creates users", async () => {
    const before = await userCount();
    const { code } = await createInvite(t.db);
    const input = { email: uniqueEmail("closed"), password: "closed password", invite_code: code };
    await expect(registerUser(getDatabase(), { input, policy: "closed", address: "x" })).rejects.toMatchObject({
      code: "forbidden",
      message: expect.stringMatching(/closed/),
    });
    expect(await userCount()).toBe(before);
    const made = await cli(["user", "create", "--email", uniqueEmail("cli"), "--password", "cli password 1"], { DATABASE_URL: t.url });
    expect(made.code).toBe(0);
    expect(await userCount()).toBe(before + 1);
  });

  it("limits registrations per client address (429 with Retry-After)", async () => {
    const address = "10.9.9.9";
    const statuses: number[] = [];
    // Invalid codes still take an attempt: the limit is on attempts, before the password is hashed.
    for (let i = 0; i < 31; i++)
      statuses.push((await post({ email: uniqueEmail(`flood${i}`), password: "flood password", invite_code: "inv_x" }, address)).status);
    expect(statuses.slice(0, 30).every((s) => s === 403)).toBe(true);
    const limited = await post({ email: uniqueEmail("flood-last"), password: "flood password" }, address);
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await limited.json()).error).toMatchObject({ code: "rate_limited", message: expect.stringMatching(/try again after/) });
  });
});

describe("the first account, raced", () => {
  it("exactly one of many simultaneous first sign-ups with the setup code becomes admin; the code then stops working", async () => {
    const fresh = await createTestDatabase();
    const setup_code = (await currentSetupCode(fresh.db)) ?? undefined;
    const results = await Promise.allSettled(
      Array.from({ length: 4 }, (_, i) =>
        registerUser(fresh, { input: { email: uniqueEmail(`first${i}`), password: "first password", setup_code }, policy: "open", address: `a${i}` }),
      ),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    for (const r of results) if (r.status === "rejected") expect(r.reason).toMatchObject({ code: "forbidden", message: expect.stringMatching(/setup code/) });
    const [row] = await fresh.db.execute<{ admins: number; users: number }>(
      sql`select count(*) filter (where is_admin)::int as admins, count(*)::int as users from users`,
    );
    expect(row).toEqual({ admins: 1, users: 1 });
  });
});
