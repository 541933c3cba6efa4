import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * A batch held back by the shared rate limit, in real Chromium against the production build and
 * a real worker process whose model calls draw on a budget of 60 requests a minute: the panel
 * says it waits on the provider's limit, at what rate it runs and about how long is left.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `provider-limit-${name}.png`), fullPage: true });

test.afterAll(async () => {
  await stopAllWorkers();
});

test("the panel says a batch waits on the provider's limit, with its rate and what is left", async ({ page }) => {
  test.setTimeout(180_000);
  // One call a second for every process: the worker's 16 slots wait on the shared schedule.
  await startWorker({ env: { FLOTILLA__RATE_LIMITS__REQUESTS_PER_MINUTE: "60" } });
  await signedInAccount(page, "provider-limit");
  const threadId = await createThreadViaApi(page, "Provider limit");
  await page.goto(`/threads/${threadId}`);
  const panel = page.getByRole("complementary", { name: "Batches" });
  await expect(panel).toHaveAttribute("data-mode", "live");
  await panel.getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Summarise {{item}}");
  await dialog.getByLabel("Items", { exact: true }).fill(Array.from({ length: 40 }, (_, i) => `ticket ${i + 1}`).join("\n"));
  await dialog.getByRole("button", { name: "Start batch", exact: true }).click();
  await expect(dialog).toHaveCount(0);

  const detail = panel.getByTestId("batch-detail");
  const waiting = detail.getByTestId("batch-waiting");
  // Once a few items finished at the limit's pace, the server has a rate and an ETA to give.
  await expect(waiting).toHaveAttribute("data-reason", "rate_limited", { timeout: 60_000 });
  await expect(waiting).toHaveText(/^Waiting on the provider's limit: running at [\d,.]+ items\/min, about .+ left\.$/, {
    timeout: 60_000,
  });
  const rate = Number((await waiting.textContent())?.match(/running at ([\d,.]+) items/)?.[1]?.replace(/,/g, ""));
  // Near the 60 calls a minute (the first seconds' window reads a little high or low); unpaced,
  // 16 slots of the simulator would run thousands a minute.
  expect(rate).toBeGreaterThan(10);
  expect(rate).toBeLessThan(150);
  await waiting.scrollIntoViewIfNeeded();
  await shot(page, "wide");
  // On a phone the panel is a drawer: the same line, on screen and within its width.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.getByTestId("batches-drawer-toggle").click();
  await expect(waiting).toContainText("Waiting on the provider's limit: running at");
  await waiting.scrollIntoViewIfNeeded();
  await expect(waiting).toBeVisible();
  const box = await waiting.boundingBox();
  expect(box!.x).toBeGreaterThanOrEqual(0);
  expect(box!.x + box!.width).toBeLessThanOrEqual(390);
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "provider-limit-phone.png") });
});
