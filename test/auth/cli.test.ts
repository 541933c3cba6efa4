import { spawn } from "node:child_process";
import path from "node:path";
import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { userIdForToken } from "@/server/auth/tokens";
import { createUser, findUserByEmail, verifyCredentials } from "@/server/auth/users";
import { users } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { uniqueEmail } from "../chat/support";

let t: TestDatabase;
let existing: string;

beforeAll(async () => {
  t = await createTestDatabase();
  existing = (await createUser(t.db, { email: uniqueEmail("existing"), password: "cli password 1" })).email;
});

/** Runs the CLI as operators do (tsx scripts/cli.ts) in a child process. */
function cli(args: string[], env: Record<string, string | undefined> = { DATABASE_URL: t.url }) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const childEnv = { ...process.env, ...env };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete childEnv[k];
    const child = spawn(path.resolve("node_modules/.bin/tsx"), ["scripts/cli.ts", ...args], { env: childEnv });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const userCount = async () => (await t.db.select({ n: sql<number>`count(*)::int` }).from(users))[0].n;

describe("scripts/cli.ts", () => {
  it("creates a user, then prints a working token alone on stdout", async () => {
    const email = uniqueEmail("cli");
    const created = await cli(["user", "create", "--email", email, "--password", "cli password 1"]);
    expect(created.code).toBe(0);
    expect(created.stderr).toBe("");
    const user = await findUserByEmail(t.db, email);
    expect(user).not.toBeNull();
    expect(created.stdout).toContain(user!.id);
    expect(await verifyCredentials(t.db, { email, password: "cli password 1" })).toMatchObject({ id: user!.id });

    const token = await cli(["token", "create", "--email", email.toUpperCase()]);
    expect(token.code).toBe(0);
    expect(token.stdout).toMatch(/^flt_[A-Za-z0-9_-]{43}\n$/);
    expect(await userIdForToken(t.db, token.stdout.trim())).toBe(user!.id);
  });

  it.each([
    ["a duplicate email", (email: string) => ["user", "create", "--email", email, "--password", "cli password 1"], 1, /already exists/],
    ["a short password", () => ["user", "create", "--email", uniqueEmail("short"), "--password", "abc"], 1, /password: .*at least 8/],
    ["an unknown email for a token", () => ["token", "create", "--email", uniqueEmail("ghost")], 1, /no user with email/],
    ["a missing --password", () => ["user", "create", "--email", uniqueEmail("nopw")], 2, /--password is required/],
    ["an unknown option", () => ["user", "create", "--emial", "x"], 2, /Unknown option '--emial'/],
    ["an unknown command", () => ["user", "delete"], 2, /unknown command "user delete"/],
  ])("fails with one line on %s and writes nothing", async (_name, args, code, message) => {
    const before = await userCount();
    const res = await cli(args(existing));
    expect(res.code).toBe(code);
    expect(res.stdout).toBe("");
    expect(res.stderr).toMatch(message);
    expect(res.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(await userCount()).toBe(before);
  });

  it("explains an unreachable database in one line", async () => {
    const res = await cli(["token", "create", "--email", "a@example.com"], { DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/^error: cannot connect to the database at 127\.0\.0\.1:1\/none \(ECONNREFUSED\); check DATABASE_URL\n$/);
  });
});
