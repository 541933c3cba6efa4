import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { POST as register } from "@/app/api/register/route";
import { createUser, verifyCredentials } from "@/server/auth/users";
import { users } from "@/server/db/schema";
import { createTestDatabase, type TestDatabase } from "../helpers/db";
import { request, uniqueEmail, useSuiteEnv } from "../chat/support";

let t: TestDatabase;

beforeAll(async () => {
  t = await createTestDatabase();
  // Open registration: the invite policy has its own suite (test/security/registration.test.ts).
  useSuiteEnv(t.url, { FLOTILLA__AUTH__REGISTRATION: "open" });
  // The first account needs the setup code (test/security/registration.test.ts); these are later ones.
  await createUser(t.db, { email: uniqueEmail("first"), password: "first password" });
});

const count = async () => (await t.db.select({ n: sql<number>`count(*)::int` }).from(users))[0].n;

describe("POST /api/register (auth.registration = open)", () => {
  it("creates the account (201) and the password signs in", async () => {
    const email = uniqueEmail("reg");
    const res = await register(request("/api/register", { body: { email, password: "registered pw" } }), undefined);
    expect(res.status).toBe(201);
    const body = await res.json();
    expect(body).toMatchObject({ id: expect.any(String), email });
    expect(Object.keys(body).sort()).toEqual(["created_at", "email", "id"]);
    expect(await verifyCredentials(t.db, { email, password: "registered pw" })).toMatchObject({ id: body.id });
  });

  it("answers 409 for a registered email", async () => {
    const email = uniqueEmail("reg-dup");
    expect((await register(request("/api/register", { body: { email, password: "registered pw" } }), undefined)).status).toBe(201);
    const res = await register(request("/api/register", { body: { email: email.toUpperCase(), password: "other pw 123" } }), undefined);
    expect(res.status).toBe(409);
    expect(await res.json()).toEqual({ error: { code: "conflict", message: expect.stringMatching(/already exists/) } });
  });

  it.each([
    ["malformed JSON", { rawBody: "{not json" }, 400, "invalid_json", /not valid JSON/],
    ["missing password", { body: { email: "a@example.com" } }, 400, "validation_failed", /^password: /],
    ["wrong type", { body: { email: 42, password: "registered pw" } }, 400, "validation_failed", /^email: /],
    ["short password", { body: { email: "a@example.com", password: "short" } }, 400, "validation_failed", /^password: .*8/],
    ["unknown field", { body: { email: "a@example.com", password: "registered pw", admin: true } }, 400, "validation_failed", /admin/],
    ["a non-string invite code", { body: { email: "a@example.com", password: "registered pw", invite_code: 7 } }, 400, "validation_failed", /^invite_code: /],
    ["array body", { body: [] }, 400, "validation_failed", /expected object/],
    ["oversized body", { body: { email: "a@example.com", password: "x".repeat(9000) } }, 413, "payload_too_large", /exceeds/],
  ])("rejects %s and writes nothing", async (_name, init, status, code, message) => {
    const before = await count();
    const res = await register(request("/api/register", { method: "POST", ...init }), undefined);
    expect(res.status).toBe(status);
    const body = await res.json();
    expect(body.error.code).toBe(code);
    expect(body.error.message).toMatch(message);
    expect(await count()).toBe(before);
  });
});
