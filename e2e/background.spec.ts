import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * Background delegation in the chat, driven by the simulator (`background task:` /
 * `background swarm:`): the answer comes at once while the card says the work runs in the
 * background; when it settles the lead's report arrives in the open chat with no reload (as a
 * settled batch's wake-up reply does), and the card's link scrolls to it.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `background-${name}.png`), fullPage: false });

async function send(page: Page, text: string) {
  await page.getByLabel("Message").fill(text);
  await page.keyboard.press("Enter");
}

/** Marks the loaded page: the mark is gone after any reload or navigation. */
async function markPage(page: Page): Promise<() => Promise<boolean>> {
  await page.evaluate(() => {
    (window as unknown as { __sameLoad?: boolean }).__sameLoad = true;
  });
  return () => page.evaluate(() => (window as unknown as { __sameLoad?: boolean }).__sameLoad === true);
}

const reports = (page: Page) => page.locator('article[data-role="assistant"]');

test("a background task's report arrives live, and its card links and scrolls to it", async ({ page }) => {
  await signedInAccount(page, "background");
  const threadId = await createThreadViaApi(page, "Background");
  await page.goto(`/threads/${threadId}`);
  const sameLoad = await markPage(page);

  await send(page, "background task: Research the tides of Lisbon [[sleep:6000]]");
  const card = page.getByTestId("subagent-card");
  await expect(card).toHaveCount(1, { timeout: 15_000 });
  // The response has ended (Send is back) while the sub-agent still runs.
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 15_000 });
  await expect(card.getByTestId("subagent-status")).toHaveText("running in background");
  await expect(card.getByTestId("background-note")).toContainText("Running in the background");
  await expect(reports(page)).toHaveCount(1);
  await expect(reports(page).first()).toContainText("in the background");
  await shot(page, "01-running-1400");
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, "02-running-390");
  await page.setViewportSize({ width: 1400, height: 900 });

  // The lead's report joins the open chat by itself.
  await expect(reports(page)).toHaveCount(2, { timeout: 60_000 });
  const report = reports(page).last();
  await expect(report).toContainText("The background task has finished (completed).");
  await expect(report).toContainText("Simulated answer to");
  const link = card.getByRole("link", { name: "Read the lead's report" });
  await expect(link).toBeVisible({ timeout: 15_000 });
  await expect(card).toHaveAttribute("data-status", "completed");
  expect(await sameLoad(), "the report arrived without a reload").toBe(true);

  // Scrolled away to the top, the link brings the report into view.
  await page.getByTestId("transcript").evaluate((el) => {
    el.scrollTop = 0;
  });
  await page.setViewportSize({ width: 390, height: 844 });
  await card.scrollIntoViewIfNeeded();
  await link.click();
  await expect(page).toHaveURL(new RegExp(`#${await report.getAttribute("id")}$`));
  await expect(report).toBeInViewport();
  await shot(page, "04-finished-390");
  await page.setViewportSize({ width: 1400, height: 900 });
  await expect(report).toBeInViewport();
  await shot(page, "03-finished-1400");
  expect(await sameLoad()).toBe(true);
});

test("a background swarm's report arrives live too", async ({ page }) => {
  await signedInAccount(page, "bgswarm");
  const threadId = await createThreadViaApi(page, "Background swarm");
  await page.goto(`/threads/${threadId}`);
  const sameLoad = await markPage(page);

  await send(page, "background swarm: Summarize {{item}} | alpha [[sleep:3000]]; beta [[sleep:500]]");
  const card = page.getByTestId("swarm-card");
  await expect(card).toBeVisible({ timeout: 15_000 });
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 15_000 });
  await expect(reports(page)).toHaveCount(2, { timeout: 60_000 });
  await expect(reports(page).last()).toContainText("The background swarm has finished: 2 of 2 sub-agents completed.");
  await expect(card).toHaveAttribute("data-status", "settled");
  await card.getByRole("link", { name: "Read the lead's report" }).click();
  await expect(reports(page).last()).toBeInViewport();
  await shot(page, "05-swarm-1400");
  await page.setViewportSize({ width: 390, height: 844 });
  await expect(reports(page).last()).toBeInViewport();
  await shot(page, "06-swarm-390");
  expect(await sameLoad(), "the report arrived without a reload").toBe(true);
});
