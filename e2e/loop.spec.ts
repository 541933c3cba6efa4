import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Closing the loop, in real Chromium against the production build (whose web process runs the
 * wake-up runner), a real worker process and the simulator: a chat-submitted batch settles and
 * the lead's summary appears in the open tab without reload; the panel says why a batch waits
 * ("Waiting: paused", "Waiting: budget") and a raised budget lets it finish.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `loop-${name}.png`), fullPage: true });

test.describe.configure({ mode: "serial" });

let page: Page;
const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const button = (scope: Locator, name: string) => scope.getByRole("button", { name, exact: true });

test.beforeAll(async ({ browser }) => {
  await startWorker({ env: { FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2" } });
  page = await browser.newPage();
  await signedInAccount(page, "loop");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("a chat-submitted batch settles and the lead's summary appears in the open tab without reload", async () => {
  test.setTimeout(120_000);
  const threadId = await createThreadViaApi(page, "Loop chat batch");
  await page.goto(`/threads/${threadId}`);
  // One item fails on every attempt, so the report has a failure to explain.
  await page.getByLabel("Message").fill("batch: Describe {{item}} [[sleep:200]] | rivers; lakes; seas; oceans [[fail]]");
  await page.keyboard.press("Enter");
  const receipt = page.getByTestId("batch-receipt");
  await expect(receipt).toContainText("Batch submitted", { timeout: 30_000 });
  const batchId = await receipt.getAttribute("data-batch-id");
  await expect(receipt).toContainText("completed", { timeout: 60_000 });
  // The web process's runner woke the lead; the tab polls the reply in (no navigation happened).
  // It reads like an assistant's report, never the internal notice it answers.
  const report = () => page.locator('article[data-role="assistant"]').filter({ hasText: `Batch ${batchId!.slice(0, 8)} finished` });
  await expect(report()).toBeVisible({ timeout: 60_000 });
  await expect(report()).toContainText("3 of 4 items succeeded, 1 failed.");
  await expect(report()).toContainText("What failed:");
  await expect(report().getByRole("listitem")).toHaveText([/^1 item \(item-4\): Simulated model failure/]);
  await expect(report()).toContainText("The failed items can be retried from there.");
  await expect(report().getByRole("link", { name: "results.jsonl" })).toHaveAttribute(
    "href",
    `/api/threads/${threadId}/subagent-batches/${batchId}/results.jsonl`,
  );
  await expect(page.locator("main")).not.toContainText(/Automatic notice|Durable batch|Simulated answer to "\[/);
  expect(page.url()).toContain(`/threads/${threadId}`);
  await report().scrollIntoViewIfNeeded();
  await shot(page, "01-wakeup-summary");
  await page.setViewportSize({ width: 390, height: 844 });
  await report().scrollIntoViewIfNeeded();
  await shot(page, "02-wakeup-summary-narrow");
  await page.setViewportSize({ width: 1400, height: 900 });
  // After a reload it is still there, exactly once.
  await page.reload();
  await expect(report()).toHaveCount(1);
  await expect(page.locator("main")).not.toContainText("Automatic notice");
});

test("the panel says Waiting: paused, and Waiting: budget until the budget is raised", async () => {
  test.setTimeout(180_000);
  const threadId = await createThreadViaApi(page, "Loop waiting");
  await page.goto(`/threads/${threadId}`);
  const panel = panelOf(page);
  await expect(panel).toHaveAttribute("data-mode", "live");

  // A budget of one token: the first settled item reaches it and the batch pauses.
  await button(panel, "New batch").click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Summarise {{item}} [[sleep:300]]");
  await dialog.getByLabel("Items", { exact: true }).fill(Array.from({ length: 12 }, (_, i) => `topic ${i + 1}`).join("\n"));
  await dialog.getByText("Limits and budget").click();
  await dialog.getByLabel("Max running items").fill("1");
  await dialog.getByLabel("Max total tokens (budget)").fill("1");
  await shot(page, "03-dialog-budget");
  await button(dialog, "Start batch").click();
  await expect(dialog).toHaveCount(0);
  const detail = detailOf(page);
  const waiting = detail.getByTestId("batch-waiting");
  await expect(waiting).toContainText("Waiting: budget", { timeout: 60_000 });
  await expect(waiting).toContainText("of 1 tokens used");
  await expect(detail).toHaveAttribute("data-status", "paused");
  await shot(page, "04-waiting-budget");
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, "05-waiting-budget-narrow");
  await page.setViewportSize({ width: 1400, height: 900 });

  // Resume is refused with the reason while the budget is reached.
  await button(detail, "Resume").click();
  await expect(detail.getByRole("alert")).toContainText("raise it with POST .../budget");

  await button(detail, "Raise budget").click();
  await detail.getByLabel("Max total tokens").fill("100000000");
  await button(detail, "Save budget").click();
  await expect(detail.getByTestId("batch-budget")).toContainText("of 100,000,000 tokens used");
  await button(detail, "Resume").click();
  await expect(detail).toHaveAttribute("data-status", /running|queued/);
  await expect(waiting).toHaveCount(0, { timeout: 20_000 });

  await button(detail, "Pause").click();
  await expect(detail.getByTestId("batch-waiting")).toContainText("Waiting: paused", { timeout: 20_000 });
  await shot(page, "06-waiting-paused");
  await button(detail, "Resume").click();
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  await expect(detail.getByTestId("batch-waiting")).toHaveCount(0);
});

test("a settled batch badges its thread in the sidebar until the thread is opened; the webhook form is reachable", async () => {
  test.setTimeout(120_000);
  const busy = await createThreadViaApi(page, "Loop badge");
  const elsewhere = await createThreadViaApi(page, "Loop elsewhere");
  const res = await page.request.post(`/api/threads/${busy}/subagent-batches`, {
    data: { submission_key: `badge-${Date.now()}`, items: ["one [[sleep:500]]", "two [[sleep:500]]"] },
  });
  expect(res.status()).toBe(201);
  await page.goto(`/threads/${elsewhere}`);
  const link = page.getByRole("navigation").getByRole("link", { name: /Loop badge/ });
  await expect(link.getByTestId("settled-badge")).toBeVisible({ timeout: 60_000 });
  await shot(page, "07-sidebar-badge");
  await link.click();
  await expect(page).toHaveURL(new RegExp(`/threads/${busy}`));
  await page.goto(`/threads/${elsewhere}`);
  await expect(page.getByRole("navigation").getByRole("link", { name: /Loop badge/ }).getByTestId("settled-badge")).toHaveCount(0, {
    timeout: 15_000,
  });

  await page.getByRole("link", { name: "Settings" }).click();
  const form = page.getByTestId("webhook-form");
  await expect(form).toContainText("No webhook set.");
  await form.getByLabel(/URL/).fill("http://example.com/hook");
  await button(form, "Save").click();
  await expect(form.getByRole("alert")).toContainText("The URL must be https");
  await form.getByLabel(/URL/).fill("https://93.184.215.14/flotilla");
  await button(form, "Save").click();
  await expect(form.getByLabel("Signing secret")).toHaveValue(/whsec_/);
  await expect(form.getByTestId("webhook-current")).toContainText("https://93.184.215.14/flotilla");
  await shot(page, "08-settings-webhook");
  await page.setViewportSize({ width: 390, height: 844 });
  await shot(page, "09-settings-webhook-narrow");
  await page.setViewportSize({ width: 1400, height: 900 });
});
