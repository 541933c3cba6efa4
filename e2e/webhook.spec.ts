import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import postgres from "postgres";
import { signedInAccount } from "./support/auth";
import { e2eDatabaseUrl, SCREENSHOT_DIR } from "./support/env";

/**
 * The Settings webhook form in real Chromium: a private address is refused with the reason, a
 * public one is saved with its secret shown once, and a secret from before Standard Webhooks
 * asks to be replaced (one click issues the new secret for the same URL).
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });

async function shoot(page: Page, name: string) {
  const form = page.getByTestId("webhook-form");
  await form.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}-desktop.png`) });
  await page.setViewportSize({ width: 390, height: 844 });
  await form.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}-mobile.png`) });
  await page.setViewportSize({ width: 1400, height: 900 });
}

test("the webhook form refuses private addresses, shows a new secret once, and prompts to replace a legacy one", async ({ page }) => {
  const account = await signedInAccount(page, "hook");
  await page.goto("/settings");
  const form = page.getByTestId("webhook-form");
  await expect(form).toContainText("No webhook set.");
  await expect(form).toContainText("batch.paused");

  await form.getByLabel(/URL/).fill("https://169.254.169.254/latest/meta-data/");
  await form.getByRole("button", { name: "Save" }).click();
  await expect(form.getByRole("alert")).toContainText("169.254.169.254 is a loopback, private, link-local or reserved address");
  await shoot(page, "webhook-refused");

  await form.getByLabel(/URL/).fill("https://93.184.215.14/flotilla");
  await form.getByRole("button", { name: "Save" }).click();
  await expect(form.getByLabel("Signing secret")).toHaveValue(/^whsec_[A-Za-z0-9+/]{43}=$/);
  await expect(form.getByTestId("webhook-current")).toContainText("https://93.184.215.14/flotilla");
  await expect(form.getByTestId("webhook-legacy")).toHaveCount(0);
  await shoot(page, "webhook-saved");

  // As a webhook saved before Standard Webhooks signatures.
  const db = postgres(e2eDatabaseUrl(), { max: 1 });
  try {
    await db`update user_webhooks w set signing = 'legacy' from users u where u.id = w.user_id and u.email = ${account.email}`;
  } finally {
    await db.end();
  }
  await page.reload();
  await expect(form.getByTestId("webhook-legacy")).toContainText("predates Standard Webhooks");
  await shoot(page, "webhook-legacy");
  await form.getByRole("button", { name: "New secret" }).click();
  await expect(form.getByLabel("Signing secret")).toHaveValue(/^whsec_/);
  await expect(form.getByTestId("webhook-legacy")).toHaveCount(0);
  await expect(form.getByTestId("webhook-current")).toContainText("https://93.184.215.14/flotilla");
});
