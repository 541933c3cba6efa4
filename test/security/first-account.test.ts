import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as register } from "@/app/api/register/route";
import { createInvite } from "@/server/auth/invites";
import { publicOrigin } from "@/server/auth/setup-code";
import { announceSetupLink } from "@/server/web-process";
import { ORIGIN, request, uniqueEmail, useSuiteEnv } from "../chat/support";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { cli } from "./support";

/**
 * The first account needs the setup code: a stranger who reaches a fresh deployment first gets
 * 403 and creates nothing; the operator has the code from the start line or `cli setup-code`.
 */

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  useSuiteEnv(t.url); // auth.registration = invite, the default
});

const userCount = async () => (await t.db.execute<{ n: number }>(sql`select count(*)::int as n from users`))[0]!.n;
const post = (body: unknown) => register(request("/api/register", { body }), undefined);

async function startLines(): Promise<string[]> {
  const lines: string[] = [];
  await announceSetupLink((line) => lines.push(line));
  return lines;
}

describe("the first account", () => {
  it("needs the setup code the web start printed and the CLI prints; after it, the code is dead and registration follows auth.registration", async () => {
    // A stranger first: no code, a wrong one, an empty one, an invite code instead: 403 JSON, nobody created.
    const invite = await createInvite(t.db);
    for (const extra of [{}, { setup_code: "setup_guess" }, { setup_code: "" }, { invite_code: invite.code }]) {
      const res = await post({ email: uniqueEmail("stranger"), password: "stranger password", ...extra });
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({ error: { code: "forbidden", message: expect.stringMatching(/setup code/) } });
    }
    expect(await userCount()).toBe(0);

    // The operator's terminal shows the link at web start; the CLI prints the same code alone.
    const lines = await startLines();
    expect(lines).toHaveLength(1);
    const match = /^Setup: (\S+)\/register\?setup=(setup_[A-Za-z0-9_-]{27})$/.exec(lines[0]!);
    expect(match?.[1]).toBe(ORIGIN); // NEXTAUTH_URL's origin
    const code = match![2]!;
    const printed = await cli(["setup-code"], { DATABASE_URL: t.url });
    expect(printed).toMatchObject({ code: 0, stdout: `${code}\n`, stderr: "" });
    expect(await startLines()).toEqual(lines); // a restart shows the same link

    const admin = await post({ email: uniqueEmail("admin"), password: "admin password", setup_code: code });
    expect(admin.status).toBe(201);
    const [row] = await t.db.execute<{ is_admin: boolean }>(sql`select is_admin from users where id = ${(await admin.json()).id}`);
    expect(row!.is_admin).toBe(true);

    // The code is spent: refused again, gone from the CLI and from the start line.
    const again = await post({ email: uniqueEmail("late"), password: "late password", setup_code: code });
    expect(again.status).toBe(403);
    expect((await again.json()).error.message).toMatch(/setup code is no longer valid/);
    const after = await cli(["setup-code"], { DATABASE_URL: t.url });
    expect(after.code).toBe(1);
    expect(after.stdout).toBe("");
    expect(after.stderr).toMatch(/^error: an account exists already[^\n]*\n$/);
    expect(await startLines()).toEqual([]);

    // A second person follows auth.registration (invite): no code 403, the invite 201 (not admin).
    expect((await post({ email: uniqueEmail("second"), password: "second password" })).status).toBe(403);
    const invited = await post({ email: uniqueEmail("invited"), password: "second password", invite_code: (await createInvite(t.db)).code });
    expect(invited.status).toBe(201);
    expect(await userCount()).toBe(2);
  }, 180_000);

  it("the link's origin is NEXTAUTH_URL's when set, else localhost and PORT", () => {
    expect(publicOrigin({ NEXTAUTH_URL: "https://flotilla.example.com/base" })).toBe("https://flotilla.example.com");
    expect(publicOrigin({ PORT: "4321" })).toBe("http://localhost:4321");
    expect(publicOrigin({})).toBe("http://localhost:3000");
  });

  it("the CLI creates users whatever the setup code", async () => {
    const fresh = await createTestDatabase();
    const made = await cli(["user", "create", "--email", uniqueEmail("cli"), "--password", "cli password 1"], { DATABASE_URL: fresh.url });
    expect(made.code).toBe(0);
    expect(made.stdout).toMatch(/^created admin /);
    expect((await cli(["setup-code"], { DATABASE_URL: fresh.url })).code).toBe(1);
  }, 120_000);
});
