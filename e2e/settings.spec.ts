import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import postgres from "postgres";
import { adminAccount, newAccount, registerViaApi, signInViaApi, signInViaUI } from "./support/auth";
import { e2eDatabaseUrl, SCREENSHOT_DIR } from "./support/env";

/**
 * Settings in real Chromium: the admin invites a second person, who registers with the code; a
 * locked-out sign-in says when to retry; tokens listed with their expiry, a revoked one stops
 * working; a password change signs out other browsers; sessions listed.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });

/** Desktop and phone screenshots; `focus` is scrolled into view first (the app scrolls inside its own pane). */
async function shoot(page: Page, name: string, focus?: Locator) {
  await focus?.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}-desktop.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await focus?.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}-mobile.png`), fullPage: true });
  await page.setViewportSize({ width: 1400, height: 900 });
}

test("the admin invites a second person, who registers with the code", async ({ page, browser }) => {
  const admin = await adminAccount(page);
  await page.goto("/");
  await page.getByRole("link", { name: "Settings", exact: true }).click();
  await expect(page.getByRole("heading", { name: "Settings", level: 1 })).toBeVisible();
  await expect(page.getByText(`Signed in as ${admin.email} · admin`)).toBeVisible();
  await expect(page.getByRole("list", { name: "Sessions" }).getByText("This browser")).toBeVisible();

  await page.getByRole("button", { name: "Create invite" }).click();
  const code = await page.getByLabel("New invite code").inputValue();
  expect(code).toMatch(/^inv_[A-Za-z0-9_-]{32}$/);
  await expect(page.getByRole("list", { name: "Invites" }).getByText("open").first()).toBeVisible();
  await shoot(page, "settings");

  const guest = await browser.newContext();
  const other = await guest.newPage();
  const invited = newAccount("invited");
  await other.goto(`/register?invite=${encodeURIComponent(code)}`);
  await expect(other.getByLabel("Invite code")).toHaveValue(code);
  await shoot(other, "register");
  await other.getByLabel("Email").fill(invited.email);
  await other.getByLabel("Password").fill(invited.password);
  await other.getByRole("button", { name: "Create account" }).click();
  await expect(other.getByRole("button", { name: "Sign out" })).toBeVisible();

  // The code was spent: a third person cannot use it.
  const third = await other.request.post("/api/register", { data: { ...newAccount("third"), invite_code: code } });
  expect(third.status()).toBe(403);
  expect((await third.json()).error.code).toBe("forbidden");
  await guest.close();

  await page.reload();
  await expect(page.getByRole("list", { name: "Invites" }).getByText(`used by ${invited.email}`)).toBeVisible();
});

test("a locked-out sign-in shows when to try again", async ({ page }) => {
  const account = newAccount("locked");
  await registerViaApi(page.request, account);
  const csrf = await page.request.get("/api/auth/csrf");
  const { csrfToken } = (await csrf.json()) as { csrfToken: string };
  for (let i = 0; i < 10; i++) {
    await page.request.post("/api/auth/callback/credentials", {
      form: { csrfToken, email: account.email, password: `wrong password ${i}`, json: "true" },
    });
  }
  await page.goto("/signin");
  await page.getByLabel("Email").fill(account.email);
  await page.getByLabel("Password").fill(account.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  // Next's route announcer is an alert too: pick ours by its text.
  await expect(page.getByText(/^Too many failed sign-ins for this account\. .*try again at .+ \(in 1[45] minutes\)\.$/)).toBeVisible();
  await expect(page).toHaveURL(/\/signin/);
  await shoot(page, "signin-locked");
});

test("the Settings page lists tokens with their expiry; a revoked token stops working at once", async ({ page }) => {
  const account = newAccount("tokens");
  await registerViaApi(page.request, account);
  await signInViaApi(page, account);
  await page.goto("/settings");
  const list = page.getByRole("list", { name: "API tokens" });
  const row = (name: string) => list.getByRole("listitem").filter({ hasText: name });

  // 90 days unless another choice is made; "Never" is offered because this is a browser session.
  await expect(page.getByLabel("Expires after")).toHaveValue("90");
  await page.getByLabel("Token name").fill("default expiry");
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(row("default expiry").getByText("expires in 90 days")).toBeVisible();

  await page.getByLabel("Token name").fill("forever");
  await page.getByLabel("Expires after").selectOption({ label: "Never" });
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(row("forever").getByText("never expires")).toBeVisible();
  const forever = await page.getByLabel("New token").inputValue();

  await page.getByLabel("Token name").fill("nightly import");
  await page.getByLabel("Expires after").selectOption({ label: "30 days" });
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(row("nightly import").getByText("expires in 30 days")).toBeVisible();
  // Read once the new token has replaced the previous one in the box.
  const token = await page.getByLabel("New token").inputValue();
  expect(token).toMatch(/^flt_/);
  expect(token).not.toBe(forever);

  const api = await page.context().request;
  const bearer = { headers: { authorization: `Bearer ${token}` } };
  expect((await api.get("/api/threads", bearer)).status()).toBe(200);

  // A token cannot mint a token that never expires, nor one that outlives it.
  const neverByToken = await api.post("/api/tokens", { ...bearer, data: { name: "copy", expires_in_days: null } });
  expect(neverByToken.status()).toBe(400);
  expect((await neverByToken.json()).error.message).toMatch(/^expires_in_days: /);
  const child = await api.post("/api/tokens", { ...bearer, data: { name: "child", expires_in_days: 365 } });
  expect(child.status()).toBe(201);
  const parentExpiry = ((await (await api.get("/api/tokens")).json()) as { tokens: Array<{ name: string; expires_at: string }> }).tokens.find(
    (t) => t.name === "nightly import",
  )!.expires_at;
  expect(new Date((await child.json()).expires_at).getTime()).toBeLessThanOrEqual(new Date(parentExpiry).getTime());

  // An expired token is marked in the list (and answers 401).
  const db = postgres(e2eDatabaseUrl(), { max: 1 });
  await db`update api_tokens set expires_at = now() - interval '2 days' where name = 'default expiry'`;
  await db.end();
  await page.reload();
  await expect(row("default expiry").getByText("Expired", { exact: true })).toBeVisible();
  await expect(row("default expiry").getByText("expired 2 days ago")).toBeVisible();
  await shoot(page, "settings-tokens", list);

  await page.getByRole("button", { name: "Revoke nightly import" }).click();
  await expect(row("nightly import")).toHaveCount(0);
  const after = await api.get("/api/threads", bearer);
  expect(after.status()).toBe(401);
  expect((await after.json()).error.code).toBe("unauthorized");

  // Sign out everywhere ends this browser's session too; tokens are not affected.
  await expect(page.getByText("API tokens are not affected")).toBeVisible();
  await page.getByRole("button", { name: "Sign out everywhere" }).click();
  await expect(page).toHaveURL(/\/signin/);
  expect((await page.request.get("/api/threads")).status()).toBe(401);
  expect((await api.get("/api/threads", { headers: { authorization: `Bearer ${forever}` } })).status()).toBe(200);
});

test("changing the password signs out other browsers; this one and tokens keep working", async ({ page, browser }) => {
  const account = newAccount("password");
  await registerViaApi(page.request, account);
  await signInViaApi(page, account);
  const elsewhere = await browser.newContext();
  const otherPage = await elsewhere.newPage();
  await signInViaApi(otherPage, account);
  const created = await page.request.post("/api/tokens", { data: { name: "script" } });
  const { token } = (await created.json()) as { token: string };

  await page.goto("/settings");
  await expect(page.getByRole("list", { name: "Sessions" }).getByRole("listitem")).toHaveCount(2);
  const form = {
    current: page.getByLabel("Current password"),
    next: page.getByLabel("New password", { exact: true }),
    confirm: page.getByLabel("Confirm new password"),
    submit: page.getByRole("button", { name: "Change password" }),
  };
  const newPassword = "a brand new e2e password";

  await form.current.fill("not my password");
  await form.next.fill(newPassword);
  await form.confirm.fill(newPassword);
  await form.submit.click();
  await expect(page.getByText("Current password is not correct.")).toBeVisible();

  await form.current.fill(account.password);
  await form.confirm.fill("something else");
  await form.submit.click();
  await expect(page.getByText("The new password and its confirmation do not match.")).toBeVisible();

  await form.next.fill("short");
  await form.confirm.fill("short");
  await form.submit.click();
  await expect(page.getByText("New password must be at least 8 characters.")).toBeVisible();
  // Nothing changed: the other browser is still signed in.
  expect((await otherPage.request.get("/api/threads")).status()).toBe(200);

  await form.next.fill(newPassword);
  await form.confirm.fill(newPassword);
  await form.submit.click();
  await expect(page.getByText("Password changed. 1 other browser was signed out; API tokens keep working.")).toBeVisible();
  await expect(page.getByRole("list", { name: "Sessions" }).getByRole("listitem")).toHaveCount(1);
  await expect(form.current).toHaveValue("");
  await shoot(page, "settings-password", page.getByText(/^Password changed\./));

  expect((await otherPage.request.get("/api/threads")).status()).toBe(401);
  expect((await page.request.get("/api/threads")).status()).toBe(200);
  expect((await page.request.get("/api/threads", { headers: { authorization: `Bearer ${token}` } })).status()).toBe(200);
  await elsewhere.close();

  // The new password signs in; the old one no longer does.
  const fresh = await browser.newContext();
  const freshPage = await fresh.newPage();
  await signInViaUI(freshPage, { ...account, password: newPassword });
  await fresh.close();
  const stale = await browser.newContext();
  const stalePage = await stale.newPage();
  await stalePage.goto("/signin");
  await stalePage.getByLabel("Email").fill(account.email);
  await stalePage.getByLabel("Password").fill(account.password);
  await stalePage.getByRole("button", { name: "Sign in" }).click();
  await expect(stalePage).toHaveURL(/\/signin/);
  expect((await stalePage.request.get("/api/threads")).status()).toBe(401);
  await stale.close();
});
