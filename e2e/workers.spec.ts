import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import postgres from "postgres";
import { adminAccount, createThreadViaApi } from "./support/auth";
import { e2eDatabaseUrl, SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The Workers view in real Chromium: a real worker process appears as live with its capacity and
 * the viewer's batch it holds leases on; after it stops, the page shows it as stopped.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });

test.afterAll(async () => {
  await stopAllWorkers();
});

test("workers view lists a live worker with the batch it works on, then shows it stopped", async ({ page }) => {
  const worker = await startWorker({ env: { FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "5" } });
  // The Workers page is the admin's.
  await adminAccount(page, "workers");
  const threadId = await createThreadViaApi(page, "workers view");
  const submitted = await page.request.post(`/api/threads/${threadId}/subagent-batches`, {
    data: {
      submission_key: `workers-${Date.now()}`,
      items: ["slow one [[sleep:60000]]", "slow two [[sleep:60000]]"],
      max_running_items: 2,
    },
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const batchId = ((await submitted.json()) as { id: string }).id;

  // Reach the page from the sidebar.
  await page.goto(`/threads/${threadId}`);
  await page.getByRole("link", { name: "Workers", exact: true }).click();
  await expect(page).toHaveURL(/\/workers$/);
  await expect(page.getByRole("heading", { name: "Workers", level: 1 })).toBeVisible();

  const table = page.getByRole("table", { name: "Workers" });
  const linkName = `general batch ${batchId.slice(0, 8)}`;
  const batchLink = table.getByRole("link", { name: linkName });
  // The page refreshes itself every few seconds; the worker claims and starts both items.
  await expect(batchLink).toBeVisible({ timeout: 30_000 });
  const row = table.getByRole("row").filter({ has: page.getByRole("link", { name: linkName }) });
  await expect(row.getByText("Live", { exact: true })).toBeVisible();
  await expect(row.getByText(/2 running · 0 leased/)).toBeVisible({ timeout: 20_000 });
  await expect(row.getByRole("cell", { name: "5", exact: true }).first()).toBeVisible(); // capacity
  const workerId = await row.getAttribute("data-worker-id");
  expect(workerId).toMatch(/^[^:]+:\d+:[0-9a-f]{6}$/);
  await expect(row.getByRole("cell", { name: workerId!.split(":")[1], exact: true })).toBeVisible(); // pid
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "workers-live.png"), fullPage: true });
  // On a phone each worker is a card: nothing is cut or runs off the screen.
  await page.setViewportSize({ width: 390, height: 844 });
  await expect(row).toBeVisible();
  const rowBox = await row.boundingBox();
  expect(rowBox!.x).toBeGreaterThanOrEqual(0);
  expect(rowBox!.x + rowBox!.width).toBeLessThanOrEqual(390);
  expect(await table.evaluate((t) => t.parentElement!.scrollWidth - t.parentElement!.clientWidth)).toBeLessThanOrEqual(0);
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "workers-live-phone.png"), fullPage: true });
  await page.setViewportSize({ width: 1400, height: 900 });

  // The batch link leads to its thread.
  await expect(batchLink).toHaveAttribute("href", `/threads/${threadId}`);

  const cancelled = await page.request.post(`/api/threads/${threadId}/subagent-batches/${batchId}/cancel`);
  expect(cancelled.status()).toBe(200);
  await worker.stop();
  await page.reload();
  const stoppedRow = page.locator(`tr[data-worker-id="${workerId}"]`);
  await expect(stoppedRow.getByText("Stopped", { exact: true })).toBeVisible();
  // The cancelled batch holds no lease any more. (Batches left running by other specs in this
  // shared database may still show as other users' leases until their leases expire.)
  await expect(stoppedRow.getByRole("link", { name: linkName })).toHaveCount(0);
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "workers-stopped.png"), fullPage: true });
});

test("workers view shows the limits learned from a provider's headers, and the share in use", async ({ page }) => {
  // What the shared limiter wrote after a provider's answers (server/runtime/rate-limit.ts):
  // 1,200 requests and 240,000 tokens a minute, half the requests in use while another program
  // drains the key.
  const sql = postgres(e2eDatabaseUrl(), { max: 1, onnotice: () => {} });
  const endpoint = `https://api.openai.example/v1|gpt-learned-${Date.now()}`;
  try {
    await sql`insert into model_rate_limits (endpoint, requests, learned_requests_per_minute, share_requests,
                learned_tokens_per_minute, learned_at, answered_at, updated_at)
              values (${endpoint}, 1234, 1200, 0.5, 240000, now(), now(), now() + interval '1 hour')`;
    await adminAccount(page, "workers-learned");
    await page.goto("/workers");
    const table = page.getByRole("table", { name: "Model endpoints" });
    const row = table.getByRole("row").filter({ hasText: endpoint });
    await expect(row.getByTestId("learned-limit")).toHaveText("1,200 req/min (using 50 %) · 240,000 tok/min");
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, "workers-learned.png"), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await expect(row.getByTestId("learned-limit")).toBeVisible();
    const box = await row.getByTestId("learned-limit").boundingBox();
    expect(box!.x + box!.width).toBeLessThanOrEqual(390);
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, "workers-learned-phone.png"), fullPage: true });
  } finally {
    await sql`delete from model_rate_limits where endpoint = ${endpoint}`;
    await sql.end();
  }
});
