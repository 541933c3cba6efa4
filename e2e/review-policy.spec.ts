import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import type { ReviewPage } from "@/lib/api/review-queue";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * A review policy set in the browser, in real Chromium against the production build, a real
 * worker and the simulator: New batch's Review ("Items that failed") queues the failed item,
 * an opened item says where it stands and "Queue for review" puts a succeeded one in /review by
 * hand, and Run a variant… starts from the original's policy and sends the one chosen (a sample).
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const ITEMS = ["a calm message", "a broken one [[fail]]", "another calm one"];

let page: Page;
let thread: string;
let batchId: string;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const rowOf = (key: string) => detailOf(page).locator(`[data-testid="item-row"][data-item-key="${key}"]`);
const shot = (p: Page, name: string) => p.screenshot({ path: path.join(SCREENSHOT_DIR, `review-policy-${name}.png`) });

async function pendingKeys(): Promise<string[]> {
  const res = await page.request.get(`/api/reviews?batch_id=${batchId}`);
  expect(res.status()).toBe(200);
  return ((await res.json()) as ReviewPage).items.map((i) => i.item_key).sort();
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "policy");
  thread = await createThreadViaApi(page, "Reviewed in the browser");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900: New batch's Review queues the failed item; an opened item is queued for review by hand", async () => {
  await page.goto(`/threads/${thread}`);
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Answer briefly: {{item}}");
  await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.join("\n"));
  const review = dialog.getByLabel("Review", { exact: true });
  await expect(review).toHaveValue("none");
  // A sample needs its share: an empty one holds the batch back, naming the field.
  await review.selectOption("sample");
  await dialog.getByLabel("Review sample percent").fill("");
  await expect(dialog.getByText("Review sample: a share between 0 and 100 %.")).toBeVisible();
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeDisabled();
  await review.selectOption("failed");
  await review.scrollIntoViewIfNeeded();
  await shot(page, "01-desktop-new-batch");
  const created = page.waitForResponse((r) => r.request().method() === "POST" && /\/subagent-batches$/.test(new URL(r.url()).pathname));
  await dialog.getByRole("button", { name: "Start batch" }).click();
  const res = await created;
  expect(res.status()).toBe(201);
  expect(res.request().postDataJSON()).toMatchObject({ review: { when: "failed" } });
  batchId = ((await res.json()) as { id: string }).id;
  await expect(detailOf(page)).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  await expect.poll(pendingKeys).toEqual(["item-2"]);

  // The failed item waits in review; a succeeded one is not queued until asked.
  await rowOf("item-2").locator("button[aria-expanded]").click();
  const failedReview = rowOf("item-2").locator("xpath=following-sibling::tr[1]").getByTestId("item-review");
  await expect(failedReview).toHaveAttribute("data-review-state", "pending");
  await expect(failedReview).toContainText("Waiting for review");
  await rowOf("item-1").locator("button[aria-expanded]").click();
  const okReview = rowOf("item-1").locator("xpath=following-sibling::tr[1]").getByTestId("item-review");
  await expect(okReview).toHaveAttribute("data-review-state", "none");
  await okReview.getByRole("button", { name: "Queue for review" }).click();
  await expect(okReview).toHaveAttribute("data-review-state", "pending");
  await expect(okReview.getByRole("link", { name: "Open Review" })).toHaveAttribute("href", "/review");
  expect(await pendingKeys()).toEqual(["item-1", "item-2"]);
  await expect(page.getByRole("complementary", { name: "Threads" }).getByTestId("review-pending-count")).toHaveText(/2/);
  await okReview.scrollIntoViewIfNeeded();
  await shot(page, "02-desktop-queued-by-hand");
});

test("1400×900: Run a variant… starts from the original's policy and sends the one chosen", async () => {
  await page.goto(`/threads/${thread}`);
  await detailOf(page).getByRole("button", { name: "Run a variant…" }).click();
  const dialog = page.getByRole("dialog", { name: "Run a variant" });
  const review = dialog.getByLabel("Review", { exact: true });
  await expect(review).toHaveValue("failed");
  await review.selectOption("sample");
  await dialog.getByLabel("Review sample percent").fill("50");
  await review.scrollIntoViewIfNeeded();
  await shot(page, "03-desktop-variant");
  const created = page.waitForResponse((r) => r.request().method() === "POST" && /\/variant$/.test(new URL(r.url()).pathname));
  await dialog.getByRole("button", { name: "Start variant" }).click();
  const res = await created;
  expect(res.status()).toBe(201);
  expect(res.request().postDataJSON()).toMatchObject({ review: { when: "sample", rate: 0.5 } });
  await expect(dialog).toHaveCount(0);
});

test("390×844: the Review field and an item's review fit the phone", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Review", { exact: true }).selectOption("sample");
  await expectFits(dialog, PHONE.width);
  await dialog.getByLabel("Review sample percent").scrollIntoViewIfNeeded();
  await shot(page, "04-phone-review-field");
  await dialog.getByRole("button", { name: "Close" }).click();
  await expect(dialog).toHaveCount(0);
  await expectFits(panelOf(page), PHONE.width);
});
