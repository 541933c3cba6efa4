import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * Background delegation in the chat, driven by the simulator (`background task:`): the answer
 * comes at once while the card says the task runs in the background; when it settles the lead
 * reports in the thread and the card links that report.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `background-${name}.png`), fullPage: false });

async function send(page: Page, text: string) {
  await page.getByLabel("Message").fill(text);
  await page.keyboard.press("Enter");
}

test("a background task answers at once, runs on, and its card links the lead's report", async ({ page }) => {
  await signedInAccount(page, "background");
  const threadId = await createThreadViaApi(page, "Background");
  await page.goto(`/threads/${threadId}`);

  await send(page, "background task: Research the tides of Lisbon [[sleep:6000]]");
  const card = page.getByTestId("subagent-card");
  await expect(card).toHaveCount(1, { timeout: 15_000 });
  // The response has ended (Send is back) while the sub-agent still runs.
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 15_000 });
  await expect(card.getByTestId("subagent-status")).toHaveText("running in background");
  await expect(card.getByTestId("background-note")).toContainText("Running in the background");
  await expect(page.locator('article[data-role="assistant"]').first()).toContainText("in the background");
  await shot(page, "01-running-1400");
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, "02-running-390");
  await page.setViewportSize({ width: 1400, height: 900 });

  const link = card.getByRole("link", { name: "Read the lead's report" });
  await expect(link).toBeVisible({ timeout: 60_000 });
  await expect(card).toHaveAttribute("data-status", "completed");
  await page.reload();
  const again = page.getByTestId("subagent-card");
  await again.getByRole("link", { name: "Read the lead's report" }).click();
  const report = page.locator('article[data-role="assistant"]').last();
  await expect(report).toContainText("The background task has finished (completed).");
  await expect(report).toContainText("Simulated answer to");
  await shot(page, "03-finished-1400");
  await page.setViewportSize({ width: 390, height: 844 });
  await again.scrollIntoViewIfNeeded();
  await shot(page, "04-finished-390");
});
