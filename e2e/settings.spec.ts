import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { adminAccount, newAccount, registerViaApi, signInViaApi } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * Settings in real Chromium: the admin invites a second person, who registers with the code; a
 * locked-out sign-in says when to retry; a revoked token stops working; sessions and tokens listed.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });

async function shoot(page: Page, name: string) {
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}-desktop.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
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

test("the Settings page lists tokens; a revoked token stops working at once", async ({ page }) => {
  const account = newAccount("tokens");
  await registerViaApi(page.request, account);
  await signInViaApi(page, account);
  await page.goto("/settings");
  await page.getByLabel("Token name").fill("nightly import");
  await page.getByLabel("Expires in days").fill("30");
  await page.getByRole("button", { name: "Create token" }).click();
  const token = await page.getByLabel("New token").inputValue();
  expect(token).toMatch(/^flt_/);
  const list = page.getByRole("list", { name: "API tokens" });
  await expect(list.getByText("nightly import")).toBeVisible();
  await expect(list.getByText(/expires/)).toBeVisible();

  const api = await page.context().request;
  const bearer = { headers: { authorization: `Bearer ${token}` } };
  expect((await api.get("/api/threads", bearer)).status()).toBe(200);
  await page.getByRole("button", { name: "Revoke nightly import" }).click();
  await expect(list).toHaveCount(0);
  const after = await api.get("/api/threads", bearer);
  expect(after.status()).toBe(401);
  expect((await after.json()).error.code).toBe("unauthorized");

  // Sign out everywhere ends this browser's session too.
  await page.getByRole("button", { name: "Sign out everywhere" }).click();
  await expect(page).toHaveURL(/\/signin/);
  expect((await page.request.get("/api/threads")).status()).toBe(401);
});
