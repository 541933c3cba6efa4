import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import { resultLineSchema } from "@/lib/api/batches";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers, type WorkerHandle } from "./support/worker";

/**
 * The batch panel in real Chromium against the production build, a real worker process and
 * the simulator: batches from the New batch dialog and from the chat, progress to 100 %,
 * pause / resume / cancel, retry, paging, JSONL export, the polling budget, and gating when
 * the worker stops.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `batch-${name}.png`), fullPage: true });

test.describe.configure({ mode: "serial" });

let page: Page;
let worker: WorkerHandle;
/** The thread of the dialog batch (later also the cancelled one) and of the chat batch. */
let dialogThread: string;
let chatThread: string;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const progressOf = (p: Page) => detailOf(p).getByRole("progressbar", { name: "Batch progress" });
const button = (scope: Locator, name: string) => scope.getByRole("button", { name, exact: true });

async function count(p: Page, name: string): Promise<number> {
  const text = (await detailOf(p).getByTestId(`count-${name}`).textContent()) ?? "";
  return Number(text.replace(/,/g, ""));
}
/** Items a worker holds: starting + running. */
async function workerHeld(p: Page): Promise<number> {
  return (await count(p, "leased")) + (await count(p, "running"));
}
/** Items not started yet: pending + queued. */
async function notStarted(p: Page): Promise<number> {
  return (await count(p, "pending")) + (await count(p, "queued"));
}
/** Items that reached an end: done + failed + cancelled. */
async function finished(p: Page): Promise<number> {
  return (await count(p, "succeeded")) + (await count(p, "failed")) + (await count(p, "cancelled"));
}
async function progress(p: Page): Promise<number> {
  return Number(await progressOf(p).getAttribute("aria-valuenow"));
}
async function waitForProgress(p: Page, min: number, timeout: number) {
  await expect.poll(() => progress(p), { timeout, intervals: [250] }).toBeGreaterThanOrEqual(min);
}

/** 300 items, every 50th poisoned with [[fail]] (6 failures). */
const ITEMS_300 = Array.from({ length: 300 }, (_, i) => (i + 1) % 50 === 0 ? `topic ${i + 1} [[fail]]` : `topic ${i + 1}`);

async function openNewBatch(p: Page): Promise<Locator> {
  // Keyboard-operable: focus the button and press Enter.
  await button(panelOf(p), "New batch").focus();
  await p.keyboard.press("Enter");
  const dialog = p.getByRole("dialog", { name: "New batch" });
  await expect(dialog).toBeVisible();
  return dialog;
}

async function submitViaDialog(
  p: Page,
  opts: { template: string; items?: string[]; file?: { name: string; text: string }; maxRunning?: number },
) {
  const dialog = await openNewBatch(p);
  await dialog.getByLabel("Prompt template").fill(opts.template);
  if (opts.file) {
    await dialog
      .getByLabel("Upload items file")
      .setInputFiles({ name: opts.file.name, mimeType: "text/plain", buffer: Buffer.from(opts.file.text) });
    await expect(dialog.getByTestId("new-batch-file")).toContainText(opts.file.name);
  } else {
    await dialog.getByLabel("Items", { exact: true }).fill(opts.items!.join("\n"));
  }
  if (opts.maxRunning) {
    await dialog.getByText("Limits").click();
    await dialog.getByLabel("Max running items").fill(String(opts.maxRunning));
  }
  return dialog;
}

test.beforeAll(async ({ browser }) => {
  worker = await startWorker();
  page = await browser.newPage();
  await signedInAccount(page, "panel");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("New batch dialog: 300 items with [[fail]] run to 100 %", async () => {
  test.setTimeout(180_000);
  dialogThread = await createThreadViaApi(page, "Dialog batch");
  await page.goto(`/threads/${dialogThread}`);
  const panel = panelOf(page);
  await expect(panel).toBeVisible();
  await expect(panel).toHaveAttribute("data-mode", "live");
  await expect(panel.getByTestId("active-count")).toHaveText("0 active");
  await expect(panel.getByText("No batches on this thread yet.")).toBeVisible();
  await shot(page, "01-empty-live");

  // Escape closes the dialog; nothing is submitted.
  await openNewBatch(page);
  await page.keyboard.press("Escape");
  await expect(page.getByRole("dialog", { name: "New batch" })).toHaveCount(0);

  // ~700 ms an item, 16 at a time: ~13 s in all, so the 2 s poll sees it mid-run on any machine.
  const template = "Summarise {{item}} in one line [[sleep:700]]";
  const dialog = await submitViaDialog(page, { template, items: ITEMS_300, maxRunning: 16 });
  await expect(dialog.getByTestId("new-batch-count")).toContainText("300 items");
  const previews = dialog.getByTestId("new-batch-preview");
  await expect(previews).toHaveCount(3);
  await expect(previews.first()).toHaveText("Summarise topic 1 in one line [[sleep:700]]");
  await expect(previews.nth(2)).toHaveText("Summarise topic 3 in one line [[sleep:700]]");
  await shot(page, "02-new-batch-dialog");

  // An invalid template is caught before anything is sent.
  await dialog.getByLabel("Prompt template").fill("Summarise in one line");
  await expect(dialog.getByRole("alert")).toHaveText("The prompt template must contain {{item}}.");
  await expect(button(dialog, "Start batch")).toBeDisabled();
  await dialog.getByLabel("Prompt template").fill(template);

  await button(dialog, "Start batch").click();
  await expect(dialog).toHaveCount(0);
  const detail = detailOf(page);
  await expect(detail).toBeVisible();
  await expect(detail.getByTestId("count-total")).toHaveText("300");
  await expect(panel.getByTestId("active-count")).toHaveText("1 active");

  await waitForProgress(page, 15, 60_000);
  expect(await progress(page)).toBeLessThan(100);
  await expect(detail).toHaveAttribute("data-status", "running");
  await expect(detail.getByTestId("stat-eta")).not.toHaveText("—");
  await expect(detail.getByTestId("stat-throughput")).toHaveText(/\/(s|min)$/);
  await shot(page, "03-dialog-batch-running");

  await waitForProgress(page, 100, 120_000);
  await expect(detail).toHaveAttribute("data-status", "completed");
  await expect(detail.getByTestId("progress-pct")).toHaveText("100%");
  // A finished batch with failures says so, in amber, with the split.
  await expect(detail.getByTestId("progress-text")).toHaveText("294 / 300 done · 6 failed");
  await expect(detail.locator('[data-status="completed"][data-tone="warn"]')).toHaveText("completed · 6 failed");
  expect(await count(page, "succeeded")).toBe(294);
  expect(await count(page, "failed")).toBe(6);
  expect(await finished(page)).toBe(300);
  expect(await workerHeld(page)).toBe(0);
  expect(await notStarted(page)).toBe(0);
  await expect(panel.getByTestId("active-count")).toHaveText("0 active");
  await expect(detail.getByTestId("stat-tokens")).not.toHaveText("0 in · 0 out");
  for (const name of ["Pause", "Resume", "Cancel"]) await expect(button(detail, name)).toBeDisabled();
  await shot(page, "04-dialog-batch-completed");
});

test("chat batch with [[fail]] items: receipt card, pause drains running and stops progress, resume finishes", async () => {
  test.setTimeout(240_000);
  chatThread = await createThreadViaApi(page, "Chat batch");
  await page.goto(`/threads/${chatThread}`);
  const items = Array.from({ length: 300 }, (_, i) => ((i + 1) % 60 === 0 ? `c${i + 1} [[fail]]` : `c${i + 1}`));
  await page.getByLabel("Message").fill(`batch: Check {{item}} [[sleep:150]] | ${items.join("; ")}`);
  await page.keyboard.press("Enter");

  const receipt = page.getByTestId("batch-receipt");
  await expect(receipt).toContainText("Batch submitted", { timeout: 30_000 });
  await expect(receipt).toContainText("300 items");
  const batchId = await receipt.getAttribute("data-batch-id");
  expect(batchId).toMatch(/^[0-9a-f-]{36}$/);
  await receipt.getByRole("link", { name: "View in batch panel" }).click();
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-batch-id", batchId!);

  await waitForProgress(page, 8, 60_000);
  await shot(page, "05-chat-batch-running");
  await button(detail, "Pause").click();
  // Optimistic: the state flips at once, then the server confirms.
  await expect(detail).toHaveAttribute("data-status", "paused");
  await expect(button(detail, "Resume")).toBeEnabled();
  await expect(button(detail, "Pause")).toBeDisabled();
  // Running items finish; nothing new starts.
  await expect.poll(() => workerHeld(page), { timeout: 20_000 }).toBe(0);
  await page.waitForTimeout(2_500); // one more poll to settle anything that was finishing
  const held = await finished(page);
  const heldProgress = await progress(page);
  expect(heldProgress).toBeLessThan(100);
  await page.waitForTimeout(4_000);
  expect(await finished(page)).toBe(held);
  expect(await progress(page)).toBe(heldProgress);
  expect(await workerHeld(page)).toBe(0);
  await shot(page, "06-chat-batch-paused");

  await button(detail, "Resume").click();
  await expect(detail).toHaveAttribute("data-status", /running|queued/);
  await expect.poll(() => finished(page), { timeout: 20_000 }).toBeGreaterThan(held);
  await waitForProgress(page, 100, 150_000);
  await expect(detail).toHaveAttribute("data-status", "completed");
  expect(await count(page, "failed")).toBe(5);
  expect(await count(page, "succeeded")).toBe(295);
  // The receipt card follows the panel's polls (no requests of its own).
  await expect(receipt).toContainText("completed");
  await shot(page, "07-chat-batch-completed");
});

test("retry a failed item: it runs again, fails again, and shows its attempts", async () => {
  test.setTimeout(120_000);
  await page.goto(`/threads/${dialogThread}`);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed");
  await detail.getByLabel("Status", { exact: true }).selectOption("failed");
  const rows = detail.getByTestId("item-row");
  await expect(rows).toHaveCount(6);
  const first = rows.first();
  await expect(first).toHaveAttribute("data-item-key", "item-50");
  await expect(first.getByTestId("item-attempts")).toHaveText("3/3");

  // Keyboard: expand the row to read the full error.
  await first.getByRole("button", { name: "topic 50 [[fail]]", exact: true }).focus();
  await page.keyboard.press("Enter");
  await expect(first.getByRole("button", { name: "topic 50 [[fail]]", exact: true })).toHaveAttribute("aria-expanded", "true");
  await expect(detail.getByTestId("item-detail")).toContainText("Simulated model failure");
  await shot(page, "08-failed-item-expanded");

  const batchId = await detail.getAttribute("data-batch-id");
  const failedItem = async () => {
    const res = await page.request.get(`/api/threads/${dialogThread}/subagent-batches/${batchId}/items?status=failed&limit=200`);
    const body = (await res.json()) as { items: { item_key: string; finished_at: string | null }[] };
    return body.items.find((it) => it.item_key === "item-50");
  };
  const before = await failedItem();
  expect(before?.finished_at).toBeTruthy();

  // The server reopens the batch and re-queues the item with fresh attempts. (A [[fail]] item
  // fails again within milliseconds, so the reopened state may never be on screen: read it from
  // the retry response instead of racing the 2 s poll.)
  const retried = page.waitForResponse((r) => r.url().includes("/retry") && r.request().method() === "POST");
  await button(first, "Retry").click();
  const response = await retried;
  expect(response.status()).toBe(200);
  const reopened = (await response.json()) as { batch: { status: string }; item: { status: string; attempts: number } };
  expect(reopened.batch.status).toMatch(/running|queued/);
  expect(reopened.item).toMatchObject({ status: "queued", attempts: 0 });
  // It ran again: it failed later than the first time.
  await expect
    .poll(async () => Date.parse((await failedItem())?.finished_at ?? "") > Date.parse(before!.finished_at!), { timeout: 60_000 })
    .toBe(true);
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
  expect(await count(page, "failed")).toBe(6);
  await expect(rows).toHaveCount(6);
  const again = detail.locator('[data-testid="item-row"][data-item-key="item-50"]');
  await expect(again).toHaveAttribute("data-status", "failed");
  await expect(again.getByTestId("item-attempts")).toHaveText("3/3");
  await shot(page, "09-retried-item-failed-again");
});

test("items load one page at a time until the end; the JSONL download has every line", async () => {
  test.setTimeout(90_000);
  await page.goto(`/threads/${dialogThread}`);
  const detail = detailOf(page);
  const rows = detail.getByTestId("item-row");
  await expect(rows).toHaveCount(50); // only the first page enters the page
  await expect(detail.getByTestId("items-shown")).toHaveText("Showing 50 of 300");
  let clicks = 0;
  while (await button(detail, "Load more").isVisible()) {
    await button(detail, "Load more").click();
    clicks++;
    await expect(rows).toHaveCount(Math.min(300, 50 * (clicks + 1)));
  }
  expect(clicks).toBe(5);
  await expect(detail.getByTestId("items-shown")).toHaveText("Showing 300 of 300");
  await expect(detail.getByTestId("items-end")).toBeVisible();
  const positions = await rows.evaluateAll((els) => els.map((e) => Number(e.querySelector("td")?.textContent)));
  expect(positions).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
  await shot(page, "10-all-pages-loaded");

  const [download] = await Promise.all([
    page.waitForEvent("download"),
    detail.getByRole("link", { name: "Download JSONL" }).click(),
  ]);
  const file = await download.path();
  const lines = readFileSync(file, "utf8").split("\n").filter((l) => l !== "");
  expect(lines).toHaveLength(300);
  const parsed = lines.map((l) => resultLineSchema.parse(JSON.parse(l)));
  expect(parsed.map((l) => l.position)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
  expect(parsed.filter((l) => l.status === "failed")).toHaveLength(6);
  expect(parsed.filter((l) => l.status === "succeeded").every((l) => typeof l.result === "string" && l.result.length > 0)).toBe(true);
});

test("cancel a second batch mid-run: every remaining item is cancelled", async () => {
  test.setTimeout(120_000);
  await page.goto(`/threads/${dialogThread}`);
  await submitViaDialog(page, { template: "Slow {{item}} [[sleep:300]]", items: ITEMS_300.map((s) => s.replace(" [[fail]]", "")), maxRunning: 4 });
  await button(page.getByRole("dialog", { name: "New batch" }), "Start batch").click();
  const detail = detailOf(page);
  await expect(panelOf(page).getByRole("list", { name: "Batches on this thread" }).getByRole("listitem")).toHaveCount(2);
  await waitForProgress(page, 3, 60_000);
  await expect(detail).toHaveAttribute("data-status", "running");

  await button(detail, "Cancel").click();
  const confirm = page.getByRole("alertdialog", { name: "Cancel this batch?" });
  await expect(confirm).toBeVisible();
  await shot(page, "11-cancel-confirm");
  // "Keep running" backs out.
  await button(confirm, "Keep running").click();
  await expect(confirm).toHaveCount(0);
  await expect(detail).toHaveAttribute("data-status", "running");

  await button(detail, "Cancel").click();
  await button(page.getByRole("alertdialog", { name: "Cancel this batch?" }), "Confirm").click();
  await expect(detail).toHaveAttribute("data-status", "cancelled");
  await expect.poll(() => workerHeld(page), { timeout: 10_000 }).toBe(0);
  const succeeded = await count(page, "succeeded");
  const cancelled = await count(page, "cancelled");
  expect(succeeded).toBeGreaterThan(0);
  expect(succeeded).toBeLessThan(300);
  expect(cancelled + succeeded + (await count(page, "failed"))).toBe(300);
  expect(await notStarted(page)).toBe(0);
  expect(await workerHeld(page)).toBe(0);
  for (const name of ["Pause", "Resume", "Cancel"]) await expect(button(detail, name)).toBeDisabled();
  // Nothing finishes after the cancel (in-flight runs were aborted and fenced).
  await page.waitForTimeout(3_000);
  await page.reload();
  await expect(detailOf(page)).toHaveAttribute("data-status", "cancelled");
  expect(await count(page, "succeeded")).toBe(succeeded);
  expect(await count(page, "cancelled")).toBe(cancelled);
  await detailOf(page).getByLabel("Status", { exact: true }).selectOption("cancelled");
  const rows = detailOf(page).getByTestId("item-row");
  await expect(rows.first()).toHaveAttribute("data-status", "cancelled");
  expect(await rows.evaluateAll((els) => els.every((e) => e.getAttribute("data-status") === "cancelled"))).toBe(true);
  await shot(page, "12-cancelled");
});

test("polling a running 5,000-item batch costs one list read and at most one page read per interval; no long tasks", async () => {
  test.setTimeout(180_000);
  const thread = await createThreadViaApi(page, "Big batch");
  await page.goto(`/threads/${thread}`);
  const lines = Array.from({ length: 5000 }, (_, i) => `row ${i + 1}`).join("\n");
  await submitViaDialog(page, {
    template: "Process {{item}} [[sleep:200]]",
    file: { name: "rows.txt", text: lines },
    maxRunning: 8,
  });
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await expect(dialog.getByTestId("new-batch-count")).toContainText("5,000 items");
  await button(dialog, "Start batch").click();
  await expect(dialog).toHaveCount(0);
  const detail = detailOf(page);
  await expect(detail.getByTestId("count-total")).toHaveText("5,000");
  await expect.poll(() => finished(page), { timeout: 60_000 }).toBeGreaterThan(20);

  // Watch 10 s of steady polling.
  await page.evaluate(() => {
    const w = window as unknown as { __longTasks: number[] };
    w.__longTasks = [];
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) w.__longTasks.push(e.duration);
    }).observe({ type: "longtask" });
  });
  const seen = { list: 0, detail: 0, items: 0, artifacts: 0, notifications: 0, approvals: 0, other: 0 };
  const otherUrls: string[] = [];
  const onRequest = (req: { url(): string; method(): string }) => {
    const u = new URL(req.url());
    if (req.method() !== "GET" || !u.pathname.startsWith("/api/")) return;
    if (/\/subagent-batches$/.test(u.pathname)) seen.list++;
    else if (/\/subagent-batches\/[^/]+$/.test(u.pathname)) seen.detail++;
    else if (/\/subagent-batches\/[^/]+\/items$/.test(u.pathname)) seen.items++;
    else if (/\/subagent-batches\/[^/]+\/files$/.test(u.pathname)) seen.artifacts++;
    else if (u.pathname === "/api/batch-notifications") seen.notifications++;
    else if (/^\/api\/threads\/[^/]+\/approvals$/.test(u.pathname)) seen.approvals++;
    else if (u.pathname !== "/api/features" && !u.pathname.startsWith("/api/auth/")) {
      seen.other++;
      otherUrls.push(u.pathname);
    }
  };
  page.on("request", onRequest);
  const before = await finished(page);
  const windowMs = 10_000;
  await page.waitForTimeout(windowMs);
  page.off("request", onRequest);
  const after = await finished(page);
  const intervals = windowMs / 2_000;
  console.log(`polling over ${windowMs} ms: ${JSON.stringify(seen)}; terminal ${before} → ${after}`);
  expect(after).toBeGreaterThan(before); // it really was running and updating
  expect(seen.list).toBeGreaterThanOrEqual(intervals - 1);
  expect(seen.list).toBeLessThanOrEqual(intervals + 1);
  expect(seen.items).toBeLessThanOrEqual(seen.list + 1);
  expect(seen.detail).toBe(0);
  // A running batch's artifacts are re-read slowly (every 30 s), never on the list's cadence.
  expect(seen.artifacts).toBeLessThanOrEqual(1);
  // The sidebar badges' one shared poll (every 5 s); a running batch causes no message polls.
  expect(seen.notifications).toBeLessThanOrEqual(windowMs / 5_000 + 1);
  // The chat's waiting tool calls: one shared poll every 2 s (a child's call can start waiting
  // at any moment of a running task), never more.
  expect(seen.approvals).toBeLessThanOrEqual(windowMs / 2_000 + 1);
  // Nothing else polls: not the Files section (it refetches when something writes files), nor
  // the chat stream (one reattach check on load).
  expect(seen.other, `other requests: ${otherUrls.join(", ")}`).toBe(0);
  const longTasks = await page.evaluate(() => (window as unknown as { __longTasks: number[] }).__longTasks);
  console.log(`long tasks: ${JSON.stringify(longTasks.map(Math.round))}`);
  expect(longTasks.filter((d) => d > 200)).toEqual([]);
  expect(await detail.getByTestId("item-row").count()).toBe(50);
  await shot(page, "13-big-batch-running");

  await button(detail, "Cancel").click();
  await button(page.getByRole("alertdialog", { name: "Cancel this batch?" }), "Confirm").click();
  await expect(detail).toHaveAttribute("data-status", "cancelled");
});

test("narrow window: the panel opens as a drawer from the thread header and stays usable", async () => {
  await page.setViewportSize({ width: 420, height: 900 });
  await page.goto(`/threads/${dialogThread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  const detail = detailOf(page);
  await expect(detail).toBeVisible();
  await detail.scrollIntoViewIfNeeded();
  const box = await panelOf(page).boundingBox();
  expect(box!.width).toBeLessThanOrEqual(420);
  await shot(page, "14-narrow");
  // Collapsing keeps just the header.
  const toggle = panelOf(page).getByRole("button", { name: "Batches" });
  await toggle.click();
  await expect(toggle).toHaveAttribute("aria-expanded", "false");
  await expect(detail).toBeHidden();
  await toggle.click();
  await expect(detail).toBeVisible();
  await page.setViewportSize({ width: 1400, height: 900 });
});

test("worker stopped: a control fails with the server's message, then the panel turns read-only; absent on a fresh thread", async () => {
  test.setTimeout(120_000);
  // A batch still running when the worker goes away.
  const thread = await createThreadViaApi(page, "Orphaned batch");
  await page.goto(`/threads/${thread}`);
  const items = Array.from({ length: 30 }, (_, i) => `o${i + 1}`);
  await submitViaDialog(page, { template: "Slow {{item}} [[sleep:1000]]", items });
  await button(page.getByRole("dialog", { name: "New batch" }), "Start batch").click();
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "running");
  // Until the click, the panel's /api/features polls see the worker it last saw alive, as if its
  // next poll (every 10 s) had not come yet; without this, a poll landing between stopping the
  // worker and the click would disable Pause first.
  const aliveFeatures = await (await page.request.get("/api/features")).json();
  let holdFeatures = true;
  await page.route("**/api/features", (route) => (holdFeatures ? route.fulfill({ json: aliveFeatures }) : route.continue()));
  await worker.stop();

  // Pause is still enabled, and the server refuses it.
  holdFeatures = false;
  await button(detail, "Pause").click();
  await expect(detail.getByRole("alert")).toContainText("no batch worker is running");
  await expect(detail).toHaveAttribute("data-status", "running"); // the optimistic "paused" rolled back
  await expect(panelOf(page)).toHaveAttribute("data-mode", "read-only"); // the refusal re-checked the features
  await shot(page, "15-control-refused-no-worker");

  await page.goto(`/threads/${dialogThread}`);
  const panel = panelOf(page);
  await expect(panel).toHaveAttribute("data-mode", "read-only");
  await expect(panel.getByTestId("read-only-note")).toContainText("No worker is running");
  for (const name of ["Pause", "Resume", "Cancel"]) {
    await expect(button(detailOf(page), name)).toBeDisabled();
    await expect(button(detailOf(page), name)).toHaveAttribute("title", /No worker is running/);
  }
  await expect(button(panel, "New batch")).toBeDisabled();
  // Inspection and export still work.
  await expect(detailOf(page).getByRole("link", { name: "Download JSONL" })).toBeVisible();
  await panel.getByTitle(/^Batch [0-9a-f-]{36}$/).last().click();
  await detailOf(page).getByLabel("Status", { exact: true }).selectOption("failed");
  await expect(detailOf(page).getByTestId("item-row")).toHaveCount(6);
  await expect(button(detailOf(page).getByTestId("item-row").first(), "Retry")).toBeDisabled();
  await shot(page, "16-read-only");

  const fresh = await createThreadViaApi(page, "Fresh thread");
  const features = page.waitForResponse((r) => r.url().endsWith("/api/features"));
  const list = page.waitForResponse((r) => r.url().includes(`/threads/${fresh}/subagent-batches`));
  await page.goto(`/threads/${fresh}`);
  expect((await (await features).json()).worker_runtime.alive).toBe(false);
  expect((await (await list).json()).batches).toEqual([]);
  await page.waitForTimeout(500);
  await expect(panelOf(page)).toHaveCount(0);
  await shot(page, "17-fresh-thread-no-panel");
});
