import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { type APIRequestContext, expect, type Page } from "@playwright/test";
import { e2eDatabaseUrl } from "./env";

/**
 * Account helpers for browser tests. The UI helpers go through the real pages; the API
 * helpers are quicker set-up for specs that test something else (they share the page's
 * cookies because they use `page.request`).
 */

export interface Account {
  email: string;
  password: string;
}

export function newAccount(prefix = "e2e"): Account {
  return { email: `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString("hex")}@example.com`, password: "e2e password 123" };
}

/**
 * The first account's setup code while no account exists (`cli setup-code`), else undefined:
 * whichever spec registers first through HTTP uses it, as the person at the terminal would.
 */
export function pendingSetupCode(): string | undefined {
  const out = spawnSync(process.execPath, ["--import", "tsx", "scripts/cli.ts", "setup-code"], {
    env: { ...process.env, DATABASE_URL: e2eDatabaseUrl() },
    encoding: "utf8",
  });
  if (out.status === 0) return out.stdout.trim();
  expect(out.stderr, "cli setup-code failed for another reason than an existing account").toMatch(/account exists/);
  return undefined;
}

/** Registers through /register (through the Setup link when first); the page signs the new user in and lands on the app. */
export async function registerViaUI(page: Page, account: Account): Promise<void> {
  const setup = pendingSetupCode();
  await page.goto(setup ? `/register?setup=${encodeURIComponent(setup)}` : "/register");
  await page.getByLabel("Email").fill(account.email);
  await page.getByLabel("Password").fill(account.password);
  await page.getByRole("button", { name: "Create account" }).click();
  await expect(page).not.toHaveURL(/\/(register|signin)/);
  await expect(page.getByRole("button", { name: "Sign out" })).toBeVisible();
}

export async function signInViaUI(page: Page, account: Account): Promise<void> {
  await page.goto("/signin");
  await page.getByLabel("Email").fill(account.email);
  await page.getByLabel("Password").fill(account.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).not.toHaveURL(/\/signin/);
  await expect(page.getByRole("button", { name: "Sign out" })).toBeVisible();
}

export async function signOutViaUI(page: Page): Promise<void> {
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/signin/);
}

let registrations = 0;

/**
 * Registers through the API, each call from its own documentation-range address (the e2e
 * server trusts loopback as a proxy: playwright.config.ts), so the specs' many accounts stay
 * under the per-address registration limit.
 */
export async function registerViaApi(request: APIRequestContext, account: Account): Promise<void> {
  const setup_code = pendingSetupCode();
  const n = ++registrations;
  const from = `198.51.${(process.pid + n) % 250}.${(n % 250) + 1}`;
  const res = await request.post("/api/register", {
    data: setup_code ? { ...account, setup_code } : account,
    headers: { "x-forwarded-for": from },
  });
  expect(res.status(), await res.text()).toBe(201);
}

/** Signs in with next-auth's credentials endpoint; the session cookie lands in the page's context. */
export async function signInViaApi(page: Page, account: Account): Promise<void> {
  const csrf = await page.request.get("/api/auth/csrf");
  const { csrfToken } = (await csrf.json()) as { csrfToken: string };
  const res = await page.request.post("/api/auth/callback/credentials", {
    form: { csrfToken, email: account.email, password: account.password, json: "true" },
  });
  expect(res.ok(), `sign-in failed: HTTP ${res.status()}`).toBe(true);
  const cookies = await page.context().cookies();
  expect(cookies.some((c) => c.name.endsWith("next-auth.session-token")), "no session cookie after sign-in").toBe(true);
}

/** A fresh account, registered and signed in (API), ready for `page.goto`. */
export async function signedInAccount(page: Page, prefix = "e2e"): Promise<Account> {
  const account = newAccount(prefix);
  await registerViaApi(page.request, account);
  await signInViaApi(page, account);
  return account;
}

/** Creates a thread through the API as the page's user; returns its id. */
export async function createThreadViaApi(page: Page, title?: string): Promise<string> {
  const res = await page.request.post("/api/threads", { data: title === undefined ? {} : { title } });
  expect(res.status(), await res.text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

/** Runs the operator CLI against the e2e server's database; returns its stdout. */
export function cliE2E(args: string[]): string {
  const out = spawnSync(process.execPath, ["--import", "tsx", "scripts/cli.ts", ...args], {
    env: { ...process.env, DATABASE_URL: e2eDatabaseUrl() },
    encoding: "utf8",
  });
  expect(out.status, out.stderr).toBe(0);
  return out.stdout.trim();
}

/** An admin account made by the operator CLI (`user create --admin`), signed in (API). */
export async function adminAccount(page: Page, prefix = "admin"): Promise<Account> {
  const account = newAccount(prefix);
  cliE2E(["user", "create", "--email", account.email, "--password", account.password, "--admin"]);
  await signInViaApi(page, account);
  return account;
}
