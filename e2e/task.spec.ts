import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * Ordinary delegation in the chat, driven by the simulator (`task:` lines become parallel
 * `task` calls): three cards go live and complete, and Stop mid-run cancels them all.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `task-${name}.png`), fullPage: true });

async function send(page: Page, text: string) {
  await page.getByLabel("Message").fill(text);
  await page.keyboard.press("Enter");
}

test("three delegated tasks show live cards that reach completed, and stay so after reload", async ({ page }) => {
  await signedInAccount(page, "task");
  const threadId = await createThreadViaApi(page, "Delegation");
  await page.goto(`/threads/${threadId}`);

  await send(
    page,
    ["task: Research alpha [[sleep:3000]]", "task: Research beta [[sleep:1500]]", "task: Research gamma [[sleep:300]]"].join("\n"),
  );
  const cards = page.getByTestId("subagent-card");
  await expect(cards).toHaveCount(3, { timeout: 15_000 });
  // Live: gamma completes while alpha is still running.
  await expect(cards.nth(2)).toHaveAttribute("data-status", "completed");
  await expect(cards.nth(0)).toHaveAttribute("data-status", "running");
  await shot(page, "01-live");

  for (let i = 0; i < 3; i++) await expect(cards.nth(i)).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  await expect(cards.nth(0)).toContainText("Research alpha");
  await expect(cards.nth(0)).toContainText("general");
  await expect(cards.nth(0)).toContainText("simulator");
  await expect(cards.nth(0).getByTestId("subagent-tokens")).toHaveText(/^[1-9]\d* in · [1-9]\d* out$/);
  await expect(cards.nth(0).getByTestId("subagent-duration")).toHaveText(/\d(\.\d)? s$/);
  // The lead answers after the tool results.
  await expect(page.locator('article[data-role="assistant"]').last()).toContainText("3 sub-agents finished:", { timeout: 15_000 });
  await shot(page, "02-completed");

  await page.reload();
  const again = page.getByTestId("subagent-card");
  await expect(again).toHaveCount(3);
  for (let i = 0; i < 3; i++) await expect(again.nth(i)).toHaveAttribute("data-status", "completed");
  await expect(again.nth(1)).toContainText("Research beta");
  await shot(page, "03-reloaded");
});

test("Stop mid-run cancels every delegated task and reports how many stopped", async ({ page }) => {
  await signedInAccount(page, "task-stop");
  const threadId = await createThreadViaApi(page, "Stop");
  await page.goto(`/threads/${threadId}`);

  await send(page, ["task: Long one [[sleep:60000]]", "task: Long two [[sleep:60000]]", "task: Long three [[sleep:60000]]"].join("\n"));
  const cards = page.getByTestId("subagent-card");
  await expect(cards).toHaveCount(3, { timeout: 15_000 });
  for (let i = 0; i < 3; i++) await expect(cards.nth(i)).toHaveAttribute("data-status", "running");
  await shot(page, "04-running");

  await page.getByRole("button", { name: "Stop" }).click();
  for (let i = 0; i < 3; i++) await expect(cards.nth(i)).toHaveAttribute("data-status", "cancelled", { timeout: 15_000 });
  await expect(page.getByTestId("stop-report")).toHaveText("Stopped 3 sub-agents.");
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible();
  await shot(page, "05-stopped");

  // After a reload the transcript still shows the cancelled cards and the report.
  await page.reload();
  const again = page.getByTestId("subagent-card");
  await expect(again).toHaveCount(3);
  for (let i = 0; i < 3; i++) await expect(again.nth(i)).toHaveAttribute("data-status", "cancelled");
  await expect(page.getByTestId("stop-report")).toHaveText("Stopped 3 sub-agents.");
  await shot(page, "06-stopped-reloaded");

  const runs = await page.request.get(`/api/threads/${threadId}/runs`);
  const body = (await runs.json()) as { runs: Array<{ kind: string; status: string }> };
  expect(body.runs.filter((r) => r.kind === "task").map((r) => r.status)).toEqual(["cancelled", "cancelled", "cancelled"]);
});
