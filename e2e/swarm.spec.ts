import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * A simulator-driven agent_swarm in the chat: the card goes live (rows update while children
 * run, out of order), settles with the ordered result, shows its trace, and survives reload.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `swarm-${name}.png`), fullPage: true });

test("a swarm card runs live and reaches its ordered result", async ({ page }) => {
  await signedInAccount(page, "swarm");
  const threadId = await createThreadViaApi(page, "Swarm");
  await page.goto(`/threads/${threadId}`);

  // gamma finishes first and alpha last: the card must still list them in input order.
  await page.getByLabel("Message").fill("swarm: Summarize {{item}} | alpha [[sleep:4000]]; beta [[sleep:1500]]; gamma [[sleep:200]]");
  await page.keyboard.press("Enter");

  const card = page.getByTestId("swarm-card");
  await expect(card).toBeVisible({ timeout: 15_000 });
  const rows = card.getByTestId("swarm-row");
  // Live: gamma done while alpha still runs.
  await expect(card.locator('[data-testid="swarm-row"][data-item-id="item-3"]')).toHaveAttribute("data-status", "completed");
  await expect(card.locator('[data-testid="swarm-row"][data-item-id="item-1"]')).toHaveAttribute("data-status", "running");
  await expect(card).toHaveAttribute("data-status", "running");
  await shot(page, "01-live");

  await expect(card).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  await expect(rows).toHaveCount(3);
  expect(await rows.evaluateAll((els) => els.map((e) => e.getAttribute("data-item-id")))).toEqual(["item-1", "item-2", "item-3"]);
  expect(await rows.evaluateAll((els) => els.map((e) => e.getAttribute("data-status")))).toEqual(["completed", "completed", "completed"]);
  await expect(card.getByTestId("swarm-counts")).toHaveText("3 items · 3 completed · 0 failed · 0 cancelled");
  await expect(rows.nth(0)).toContainText("Simulated answer to");

  // The lead answers after the swarm with its synthesis.
  await expect(page.locator('article[data-role="assistant"]').last()).toContainText("The swarm finished: 3 of 3 items completed.", { timeout: 15_000 });

  // The trace opens under the card.
  await card.getByText(/^Trace \(\d+ events\)$/).click();
  const trace = card.getByTestId("swarm-trace");
  await expect(trace).toContainText("item-3");
  await expect(trace).toContainText("child run completed");
  await shot(page, "02-settled-trace");

  // Reload: the settled card and its trace come back from the stored message.
  await page.reload();
  const again = page.getByTestId("swarm-card");
  await expect(again).toHaveAttribute("data-status", "completed");
  await expect(again.getByTestId("swarm-row")).toHaveCount(3);
  await expect(again.getByText(/^Trace \(\d+ events\)$/)).toBeVisible();
  await shot(page, "03-reloaded");
});
