import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The batch panel as a person sees it at 1400×900 and on a 390×844 phone: the items table fits
 * the panel (nothing clipped, Retry on screen and answering a click), filters in plain words,
 * rows that say what each item is, Load more that grows the page, opened items that wrap, one
 * time format, a cancelled batch's bar, and a Cancel dialog whose count follows the batch.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `panel-fit-${name}.png`), fullPage: true });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
/** 120 plain numbers, every 10th poisoned: 12 failures, and keys item-N that only repeat the position. */
const ITEMS = Array.from({ length: 120 }, (_, i) => ((i + 1) % 10 === 0 ? `${i + 1} [[fail]]` : String(i + 1)));

let page: Page;
let thread: string;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");

async function submit(p: Page, threadId: string, data: Record<string, unknown>): Promise<string> {
  const res = await p.request.post(`/api/threads/${threadId}/subagent-batches`, {
    data: { submission_key: `fit-${Date.now()}-${Math.random()}`, ...data },
  });
  expect(res.status(), await res.text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

async function batchState(p: Page, threadId: string, batchId: string) {
  const res = await p.request.get(`/api/threads/${threadId}/subagent-batches/${batchId}`);
  return (await res.json()) as { status: string; counts: { succeeded: number } };
}

/** Retry is on screen, inside the window, and answers a click at once. */
async function expectRetryOnScreen(row: Locator, viewportWidth: number) {
  const retry = row.getByRole("button", { name: "Retry", exact: true });
  await retry.scrollIntoViewIfNeeded();
  await expect(retry).toBeInViewport({ ratio: 1 });
  const box = await retry.boundingBox();
  expect(box!.x + box!.width).toBeLessThanOrEqual(viewportWidth);
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "fit");
  thread = await createThreadViaApi(page, "Panel fit");
  const batchId = await submit(page, thread, { prompt_template: "Answer {{item}}", items: ITEMS, max_running_items: 16 });
  await expect.poll(async () => (await batchState(page, thread, batchId)).status, { timeout: 90_000 }).toBe("completed");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900: the items table fits the panel; plain filters; rows say what each item is; one time format", async () => {
  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed");
  const rows = detail.getByTestId("item-row");
  await expect(rows).toHaveCount(50);
  await expectFits(panelOf(page), DESKTOP.width);

  // Filters say plain words, with counts.
  const options = await detail.getByLabel("Status", { exact: true }).locator("option").allTextContents();
  expect(options).toEqual([
    "All (120)",
    "Pending (0)",
    "Queued (0)",
    "Starting (0)",
    "Running (0)",
    "Needs approval (0)",
    "Done (108)",
    "Failed (12)",
    "Cancelled (0)",
  ]);

  // One word for one state: the counters say what the filter says, with the same counts.
  const cells = await detail.locator("dl").first().locator("dt").allTextContents();
  const values = await detail.locator("dl").first().locator("dd").allTextContents();
  expect(cells.map((label, i) => `${label} (${values[i]})`)).toEqual(["Total (120)", ...options.slice(1)]);
  await expect(detail.locator('[data-testid="item-row"][data-status="succeeded"]').first().getByText("done", { exact: true })).toBeVisible();

  // The row names the item by its input; the automatic key item-1 does not repeat the position.
  const first = rows.first();
  await expect(first.getByTestId("item-input")).toHaveText("1");
  expect(await first.textContent()).not.toContain("item-1");
  // A finished item shows its result on its row; a failed one its error.
  await expect(first.getByTestId("item-result")).toContainText("1");
  const failed = detail.locator('[data-testid="item-row"][data-item-key="item-10"]');
  await expect(failed.getByTestId("item-result")).toContainText("Simulated model failure");
  await expect(failed.getByTestId("item-attempts")).toHaveText("3/3");
  await expectRetryOnScreen(failed, DESKTOP.width);

  // One time format on the panel: hh:mm:ss today.
  await expect(detail.getByText(/^created \d{2}:\d{2}:\d{2}$/)).toBeVisible();

  // The opened failed item says its error (not "No result yet") and wraps inside the panel.
  await failed.getByRole("button", { name: "10 [[fail]]", exact: true }).click();
  const opened = detail.getByTestId("item-detail");
  await expect(opened.getByTestId("item-detail-error")).toContainText("Simulated model failure");
  await expect(opened).not.toContainText("No result yet");
  await expect(opened.getByText(/^\d{2}:\d{2}:\d{2}$/).first()).toBeVisible();
  await expectFits(panelOf(page), DESKTOP.width);
  await shot(page, "01-desktop-items");
});

test("1400×900: Retry shows that it works, then the item's new status", async () => {
  const detail = detailOf(page);
  const row = detail.locator('[data-testid="item-row"][data-item-key="item-20"]');
  // Hold the answer a moment, so the pending state is on screen long enough to see.
  await page.route("**/items/*/retry", async (route) => {
    await new Promise((r) => setTimeout(r, 800));
    await route.continue();
  });
  await row.getByRole("button", { name: "Retry", exact: true }).click();
  const pending = row.getByRole("button", { name: "Retrying" });
  await expect(pending).toHaveAttribute("aria-busy", "true");
  await expect(pending).toBeDisabled();
  await expect(row.getByTestId("item-retry-feedback")).toHaveText(/^Retried · (queued|waiting|starting|running|failed) again/);
  // It ran again and failed again ([[fail]] always fails): the row says so.
  await expect(row.getByTestId("item-retry-feedback")).toHaveText(/^Retried · failed again: .*Simulated model failure/, {
    timeout: 60_000,
  });
  await expect(row).toHaveAttribute("data-status", "failed");
  await page.unroute("**/items/*/retry");
  await shot(page, "02-desktop-retried");
});

test("1400×900: Load more appends rows to the page itself; no box scrolls inside the panel", async () => {
  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  const rows = detail.getByTestId("item-row");
  await expect(rows).toHaveCount(50);
  const table = detail.getByTestId("items-table");
  const before = (await table.boundingBox())!.height;
  await detail.getByRole("button", { name: "Load more", exact: true }).click();
  await expect(rows).toHaveCount(100);
  await expect(detail.getByTestId("items-shown")).toHaveText("Showing 100 of 120");
  // The table grew by the new rows instead of a nested box scrolling.
  expect((await table.boundingBox())!.height).toBeGreaterThan(before * 1.5);
  const nested = await table.evaluate((el) => {
    const out: string[] = [];
    for (let n = el.parentElement; n && n.dataset.testid !== "batch-panel"; n = n.parentElement) {
      const y = getComputedStyle(n).overflowY;
      if ((y === "auto" || y === "scroll") && n.scrollHeight > n.clientHeight) out.push(n.className);
    }
    return out;
  });
  expect(nested).toEqual([]);
  await rows.nth(99).scrollIntoViewIfNeeded();
  await expect(rows.nth(99)).toBeInViewport();
  await shot(page, "03-desktop-load-more");
});

test("390×844: the drawer's items table fits the phone with Retry on screen", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  const detail = detailOf(page);
  await expect(detail).toBeVisible();
  await expect(detail.getByTestId("item-row")).toHaveCount(50);
  await expectFits(panelOf(page), PHONE.width);
  const failed = detail.locator('[data-testid="item-row"][data-item-key="item-30"]');
  await expectRetryOnScreen(failed, PHONE.width);
  await shot(page, "04-phone-items");
  await failed.getByRole("button", { name: "30 [[fail]]", exact: true }).click();
  await expect(detail.getByTestId("item-detail-error")).toBeVisible();
  await expectFits(panelOf(page), PHONE.width);
  await detail.getByTestId("item-detail").scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "panel-fit-05-phone-item-open.png") });
  await page.setViewportSize(DESKTOP);
});

test("Cancel: the dialog's count follows the batch; a cancelled batch's bar shows what ran, not 100 %", async () => {
  test.setTimeout(120_000);
  const other = await createThreadViaApi(page, "Cancelled fit");
  const items = Array.from({ length: 60 }, (_, i) => `slow ${i + 1} [[sleep:500]]`);
  const batchId = await submit(page, other, { prompt_template: "{{item}}", items, max_running_items: 3 });
  await page.goto(`/threads/${other}`);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "running", { timeout: 30_000 });
  await expect.poll(async () => (await batchState(page, other, batchId)).counts.succeeded, { timeout: 30_000 }).toBeGreaterThan(2);

  await detail.getByRole("button", { name: "Cancel", exact: true }).click();
  const confirm = page.getByRole("alertdialog", { name: "Cancel this batch?" });
  const remaining = confirm.getByTestId("cancel-remaining");
  const first = await remaining.textContent();
  expect(first).toMatch(/^All \d+ unfinished items will be cancelled/);
  // Items keep finishing while the dialog is open; its count follows them.
  await expect.poll(() => remaining.textContent(), { timeout: 15_000 }).not.toBe(first);
  await shot(page, "06-cancel-dialog-live");
  await confirm.getByRole("button", { name: "Confirm", exact: true }).click();
  await expect(detail).toHaveAttribute("data-status", "cancelled");

  await page.reload();
  const cancelled = detailOf(page);
  await expect(cancelled).toHaveAttribute("data-status", "cancelled");
  await expect(cancelled.getByTestId("progress-pct")).toHaveText(/^\d+(\.\d)?% ran$/);
  const bar = cancelled.getByRole("progressbar", { name: "Batch progress" });
  const value = Number(await bar.getAttribute("aria-valuenow"));
  expect(value).toBeGreaterThan(0);
  expect(value).toBeLessThan(100);
  const fill = await bar.evaluate((el) => (el.firstElementChild as HTMLElement).getBoundingClientRect().width / el.getBoundingClientRect().width);
  expect(fill).toBeLessThan(0.99);
  await expectFits(panelOf(page), DESKTOP.width);
  await shot(page, "07-desktop-cancelled");
  await page.setViewportSize(PHONE);
  await page.getByTestId("batches-drawer-toggle").click();
  await expect(detailOf(page)).toBeVisible();
  await expectFits(panelOf(page), PHONE.width);
  await shot(page, "08-phone-cancelled");
  await page.setViewportSize(DESKTOP);
});
