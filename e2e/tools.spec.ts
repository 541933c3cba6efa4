import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Seeing what agents did: the simulator's [[tool:...]] makes sub-agents call tools from a task,
 * a swarm and a batch item; the task card, the swarm rows and the item detail list each call
 * (tool, status, duration, previews).
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = async (page: Page, name: string) => {
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `tools-${name}-desktop.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `tools-${name}-mobile.png`), fullPage: true });
  await page.setViewportSize({ width: 1400, height: 900 });
};

async function send(page: Page, text: string) {
  await page.getByRole("textbox", { name: "Message" }).fill(text);
  await page.keyboard.press("Enter");
}

test.afterAll(async () => {
  await stopAllWorkers();
});

test("task, swarm and batch item show the tool calls their sub-agents made", async ({ page }) => {
  test.setTimeout(180_000);
  await startWorker();
  await signedInAccount(page, "tools");
  const threadId = await createThreadViaApi(page, "Tools");
  await page.goto(`/threads/${threadId}`);

  await send(page, 'task: Count the words [[tool:count_text {"text":"one two three"}]] [[tool:current_time]]');
  const card = page.getByTestId("subagent-card");
  await expect(card).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  const calls = card.getByTestId("tool-calls");
  await expect(calls.locator("summary").first()).toHaveText("2 tool calls");
  await calls.locator("summary").first().click();
  const rows = calls.getByTestId("tool-call");
  await expect(rows).toHaveCount(2);
  await expect(rows.nth(0)).toHaveAttribute("data-tool", "count_text");
  await expect(rows.nth(0)).toHaveAttribute("data-status", "ok");
  await expect(rows.nth(1)).toHaveAttribute("data-tool", "current_time");
  await rows.nth(0).locator("summary").click();
  await expect(rows.nth(0)).toContainText('{"text":"one two three"}');
  await expect(rows.nth(0)).toContainText('"characters":13');
  await shot(page, "01-task");

  await send(page, 'swarm: Count [[tool:count_text {"text":"{{item}}"}]] | alpha beta; gamma');
  const swarm = page.getByTestId("swarm-card");
  await expect(swarm).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  const swarmRows = swarm.getByTestId("swarm-row");
  await expect(swarmRows).toHaveCount(2);
  const swarmCalls = swarmRows.nth(0).getByTestId("tool-calls").locator("summary").first();
  await expect(swarmCalls).toHaveText("1 tool call");
  await swarmCalls.click();
  await swarmRows.nth(0).getByTestId("tool-call").locator("summary").click();
  await expect(swarmRows.nth(0).getByTestId("tool-call")).toContainText('"characters":10');
  await swarm.scrollIntoViewIfNeeded();
  await shot(page, "02-swarm");

  await send(page, 'batch: Count [[tool:count_text {"text":"{{item}}"}]] | red; green blue');
  const panel = page.getByRole("complementary", { name: "Batches" });
  const detail = panel.getByTestId("batch-detail");
  await expect(detail.getByTestId("progress-pct")).toHaveText("100%", { timeout: 60_000 });
  const item = panel.locator('[data-testid="item-row"][data-item-key="item-2"]');
  await expect(item).toHaveAttribute("data-status", "succeeded");
  await item.getByRole("button", { name: "green blue" }).click();
  const itemDetail = panel.getByTestId("item-detail");
  await expect(itemDetail).toContainText("1 tool call");
  const itemCall = itemDetail.getByTestId("tool-call");
  await expect(itemCall).toHaveAttribute("data-tool", "count_text");
  await itemCall.locator("summary").click();
  await expect(itemCall).toContainText('{"text":"green blue"}');
  await itemDetail.scrollIntoViewIfNeeded();
  await shot(page, "03-batch-item");
});
