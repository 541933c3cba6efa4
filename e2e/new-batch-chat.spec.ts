import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * What a newcomer meets after the New batch dialog, in real Chromium against the production
 * build, a real worker process and the simulator: the chat shows the batch's receipt card (not
 * the empty "New conversation … Try one:") and the thread takes its title from the batch, at
 * once and after a reload; the file picker says one state; a finished batch with failed items
 * offers "Retry failed (N)", which asks first and re-runs them (the simulator's [[fail]] fails them
 * again: what is tested is the retry), and then counts its elapsed time from the retry.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `newcomer-${name}.png`) });

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const TEMPLATE = "Classify the urgency of this support message and name the product area it is about: {{message}}";
const CSV = [
  "message",
  "The app crashes when I upload a photo",
  '"Love the new dark mode, thanks!"',
  "I was charged twice this month [[fail]]",
  "Where do I change my password? [[fail]]",
].join("\n");

test.describe.configure({ mode: "serial" });
let page: Page;

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "newcomer");
});
test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

async function newThread(p: Page): Promise<string> {
  await p.goto("/");
  await p.getByRole("button", { name: "New thread" }).first().click();
  await expect(p).toHaveURL(/\/threads\/[0-9a-f-]{36}$/);
  return p.url().split("/").pop()!;
}

let threadId: string;
let batchId: string;

test("a batch from the New batch dialog shows its receipt in the chat and titles the thread", async () => {
  threadId = await newThread(page);
  const chat = page.getByRole("region", { name: "Chat" });
  await expect(chat.getByRole("heading", { level: 1 })).toHaveText("New thread");
  await expect(chat.getByText("New conversation")).toBeVisible();

  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill(TEMPLATE);
  // Before a file: the picker says what it takes, not "No file chosen" beside a file.
  await expect(dialog.getByText(".txt, .csv or .jsonl, up to 20 MB")).toBeVisible();
  await dialog.getByLabel("Upload items file").setInputFiles({ name: "messages.csv", mimeType: "text/csv", buffer: Buffer.from(CSV) });
  await expect(dialog.getByTestId("new-batch-file")).toHaveText("messages.csv (1 KB)");
  await expect(dialog.getByText(".txt, .csv or .jsonl, up to 20 MB")).toHaveCount(0);
  await expect(dialog.getByText("Choose another file…")).toBeVisible();
  await expect(dialog.getByTestId("new-batch-count")).toContainText("4 items");
  const picker = await dialog.getByText("Choose another file…").evaluate((el) => el.parentElement!.textContent);
  expect(picker).not.toMatch(/no file/i);
  await shot(page, "01-dialog-file-1400");
  await page.setViewportSize(PHONE);
  await dialog.getByTestId("new-batch-file").scrollIntoViewIfNeeded();
  await shot(page, "02-dialog-file-390");
  await page.setViewportSize(DESKTOP);

  await dialog.getByRole("button", { name: "Start batch" }).click();
  await expect(dialog).toHaveCount(0);
  batchId = (await detailOf(page).getAttribute("data-batch-id")) ?? "";
  expect(batchId).toBeTruthy();

  // The chat: the receipt card, on the person's side; no empty-conversation prompt.
  const receipt = chat.getByTestId("batch-receipt");
  await expect(receipt).toBeVisible();
  await expect(receipt).toHaveAttribute("data-batch-id", batchId);
  await expect(receipt).toContainText("Batch submitted");
  await expect(receipt).toContainText("4 items");
  await expect(chat.getByText("You started a batch")).toBeVisible();
  await expect(chat.getByText("New conversation")).toHaveCount(0);
  await expect(chat.getByText("Try one:")).toHaveCount(0);
  // The thread's title comes from the batch, cut at a word with an ellipsis, in the header and the sidebar.
  const title = "Classify the urgency of this support message and name the product area it is…";
  await expect(chat.getByRole("heading", { level: 1 })).toHaveText(title);
  await expect(page.getByRole("complementary", { name: "Threads" }).getByTestId("thread-row").first()).toContainText(title);
  await expect(receipt.getByTestId("receipt-progress")).toBeVisible();
  await shot(page, "03-receipt-1400");

  // The receipt's link selects the batch; after a reload everything is still there.
  await page.reload();
  await expect(chat.getByTestId("batch-receipt")).toHaveAttribute("data-batch-id", batchId);
  await expect(chat.getByRole("heading", { level: 1 })).toHaveText(title);
  await page.setViewportSize(PHONE);
  await expect(chat.getByTestId("batch-receipt")).toBeInViewport();
  await shot(page, "04-receipt-390");
  await page.setViewportSize(DESKTOP);
});

test("Retry failed (N) asks first, re-runs the failed items, and times the batch from the retry", async () => {
  const detail = detailOf(page);
  // [[fail]] fails two items (a provider error that is not retried).
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  await expect(detail.getByTestId("count-failed")).toHaveText("2");
  const retry = detail.getByRole("button", { name: "Retry failed (2)" });
  await expect(retry).toBeEnabled();

  // Asked first; keeping it as it is changes nothing.
  await retry.click();
  const ask = page.getByRole("alertdialog", { name: "Retry the 2 failed items?" });
  await expect(ask.getByTestId("retry-failed-confirm")).toHaveText(
    "All 2 will run again from the start with fresh attempts; their errors are cleared. The batch reopens; its elapsed time and throughput count from the retry.",
  );
  await expect(ask.getByRole("button", { name: "Keep as is" })).toBeFocused();
  await shot(page, "05-retry-confirm-1400");
  await page.setViewportSize(PHONE);
  await shot(page, "06-retry-confirm-390");
  await page.setViewportSize(DESKTOP);
  await ask.getByRole("button", { name: "Keep as is" }).click();
  await expect(ask).toHaveCount(0);
  await expect(detail).toHaveAttribute("data-status", "completed");
  await expect(detail.getByTestId("count-failed")).toHaveText("2");

  // Sit finished a while: the retry's elapsed time must not count it.
  await page.waitForTimeout(4_000);
  type Item = { item_key: string; status: string; finished_at: string | null };
  const failedItems = async (): Promise<Item[]> => {
    const res = await page.request.get(`/api/threads/${threadId}/subagent-batches/${batchId}/items?limit=50&status=failed`);
    return ((await res.json()) as { items: Item[] }).items;
  };
  const before = await failedItems();
  expect(before).toHaveLength(2);
  await retry.click();
  await page.getByRole("alertdialog", { name: "Retry the 2 failed items?" }).getByRole("button", { name: "Retry 2" }).click();
  await expect(detail.getByTestId("retry-failed-feedback")).toHaveText("Retried 2 items.");
  // Both ran again (and failed again): they finished after their first ends, and the batch settled again.
  await expect
    .poll(async () => {
      const now = await failedItems();
      return now.length === 2 && now.every((i) => (i.finished_at ?? "") > (before.find((b) => b.item_key === i.item_key)?.finished_at ?? "~"));
    }, { timeout: 60_000 })
    .toBe(true);
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
  await expect(detail.getByTestId("count-succeeded")).toHaveText("2");
  // The button follows the count, and the report of what it did stays.
  await expect(detail.getByRole("button", { name: "Retry failed (2)" })).toBeEnabled();
  await expect(detail.getByTestId("retry-failed-feedback")).toHaveText("Retried 2 items.");
  const elapsed = detail.getByTestId("stat-elapsed");
  await expect(elapsed).toContainText("since retry");
  // The retry's own second or two, not the four seconds it sat finished before (nor the first run).
  const text = (await elapsed.textContent()) ?? "";
  const [, value, unit] = /^([\d.]+) (ms|s) since retry$/.exec(text) ?? [];
  const seconds = unit === "ms" ? Number(value) / 1000 : Number(value);
  expect(seconds, text).toBeLessThan(4);
  await shot(page, "07-retried-1400");
  await page.setViewportSize(PHONE);
  await page.getByTestId("batches-drawer-toggle").click();
  await detail.getByTestId("stat-elapsed").scrollIntoViewIfNeeded();
  await shot(page, "08-retried-390");
  await page.setViewportSize(DESKTOP);
});
