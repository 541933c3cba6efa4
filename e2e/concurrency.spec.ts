import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * One concurrency story, in real Chromium against the production build and a real worker whose
 * subagent_runtime.max_running is 2: the New batch dialog shows the workers' slots beside "Max
 * running items"; a batch asking for 6 at a time runs 2, and the panel says the workers are the
 * limit and which setting raises it. On a desktop and a phone, with screenshots of both screens.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
test.describe.configure({ mode: "serial" });

const SIZES = [
  { name: "desktop", viewport: { width: 1400, height: 900 } },
  { name: "phone", viewport: { width: 390, height: 844 } },
] as const;

/** Slow items, so some wait for a slot while the panel is looked at. */
const ITEMS = Array.from({ length: 8 }, (_, i) => `ticket ${i + 1} [[sleep:4000]]`);

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });

test.beforeAll(async () => {
  await startWorker({ env: { FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "2" } });
});

test.afterAll(async () => {
  await stopAllWorkers();
});

for (const size of SIZES) {
  test(`${size.viewport.width}×${size.viewport.height}: the dialog shows the workers' slots, the panel what limits the batch`, async ({ browser }) => {
    const page = await browser.newPage({ viewport: size.viewport });
    await signedInAccount(page, `concurrency-${size.name}`);
    const thread = await createThreadViaApi(page, `Concurrency ${size.name}`);
    await page.goto(`/threads/${thread}`);
    if (size.name === "phone") await page.getByTestId("batches-drawer-toggle").click();
    await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
    const dialog = page.getByRole("dialog", { name: "New batch" });
    await dialog.getByLabel("Prompt template").fill("Triage {{item}}");
    await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.join("\n"));
    await dialog.getByText("Limits and budget").click();
    const field = dialog.getByLabel("Max running items");
    // The workers' capacity beside the field, which describes it.
    const hint = "The workers have 2 slots now (subagent_runtime.max_running each), shared by every batch: no more run at once.";
    await expect(field).toHaveAccessibleDescription(hint);
    await field.fill("6");
    await dialog.getByText(hint).scrollIntoViewIfNeeded();
    await expect(dialog.getByText(hint)).toBeInViewport();
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, `concurrency-dialog-${size.name}.png`) });

    const created = page.waitForResponse((r) => r.request().method() === "POST" && /\/subagent-batches$/.test(new URL(r.url()).pathname));
    await dialog.getByRole("button", { name: "Start batch" }).click();
    const res = await created;
    expect(res.status()).toBe(201);
    const batchId = ((await res.json()) as { id: string }).id;
    await expect(dialog).toHaveCount(0);

    // 6 asked for, 2 run: the panel names the workers as the limit and the setting that raises it.
    const detail = panelOf(page).getByTestId("batch-detail");
    const line = detail.getByTestId("batch-concurrency");
    await expect(line).toHaveText(
      "Running 2 of 6 at a time: the workers have 2 slots in all, shared by every batch. To run more at once, raise subagent_runtime.max_running (each worker's slots) or start another worker.",
      { timeout: 30_000 },
    );
    await line.scrollIntoViewIfNeeded();
    const box = await line.boundingBox();
    expect(box!.x + box!.width).toBeLessThanOrEqual(size.viewport.width);
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, `concurrency-panel-${size.name}.png`) });

    const cancelled = await page.request.post(`/api/threads/${thread}/subagent-batches/${batchId}/cancel`);
    expect(cancelled.status()).toBe(200);
    await expect(line).toHaveCount(0);
    await page.close();
  });
}
