import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Batch items waiting for approval, in real Chromium against the production build, a real worker
 * (tools.require_approval = text/count_*) and the simulator: the panel says how many wait, shows
 * each call's tool and arguments, and Approve, Deny and "Approve all" move them on.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `approvals-${name}.png`), fullPage: true });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const call = (text: string) => `Count the words [[tool:count_text {"text":"${text}"}]]`;

let page: Page;
let thread: string;
let batchId: string;

async function batchState(p: Page) {
  const res = await p.request.get(`/api/threads/${thread}/subagent-batches/${batchId}`);
  expect(res.status()).toBe(200);
  return (await res.json()) as { status: string; counts: Record<string, number> };
}

test.beforeAll(async ({ browser }) => {
  await startWorker({ env: { FLOTILLA__TOOLS__REQUIRE_APPROVAL: '["text/count_*"]' } });
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "approvals");
  thread = await createThreadViaApi(page, "Approvals");
  const res = await page.request.post(`/api/threads/${thread}/subagent-batches`, {
    data: {
      submission_key: `approvals-${Date.now()}`,
      items: [
        { item_key: "alpha", prompt: call("the quick brown fox") },
        { item_key: "beta", prompt: call("jumps over") },
        { item_key: "gamma", prompt: call("the lazy dog") },
      ],
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
  await expect.poll(async () => (await batchState(page)).counts.awaiting_approval, { timeout: 90_000 }).toBe(3);
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("the panel lists the waiting calls; Approve, Deny and Approve all decide them", async () => {
  await page.goto(`/threads/${thread}`);
  const waiting = page.getByTestId("waiting-approvals");
  await expect(waiting.getByRole("heading", { name: "3 items need approval" })).toBeVisible({ timeout: 30_000 });
  await expect(waiting.getByRole("button", { name: /^Approve all/ })).toHaveAccessibleName(/^Approve all 3\s*count_text$/);
  const alpha = waiting.getByRole("group", { name: "alpha" });
  await expect(alpha).toContainText("count_text");
  await expect(alpha).toContainText('{"text": "the quick brown fox"}');
  // The chat's receipt of the batch says it waits for a person, as it says paused or over budget.
  const receipt = page.getByTestId("batch-receipt").getByTestId("receipt-approval");
  await expect(receipt).toHaveText("Waiting for your approval: 3 items want to call a tool — Approve or Deny in the batch panel.");
  await shot(page, "desktop");
  // On a phone the panel is a drawer: the same list, each call's buttons on screen.
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  const phoneAlpha = page.getByTestId("waiting-approvals").getByRole("group", { name: "alpha" });
  await expect(phoneAlpha).toContainText('{"text": "the quick brown fox"}');
  const deny = await phoneAlpha.getByRole("button", { name: "Deny", exact: true }).boundingBox();
  expect(deny!.x + deny!.width).toBeLessThanOrEqual(PHONE.width);
  await shot(page, "phone");
  // The receipt in the chat, at both sizes.
  for (const [size, viewport] of [["phone", PHONE], ["desktop", DESKTOP]] as const) {
    await page.setViewportSize(viewport);
    await page.goto(`/threads/${thread}`);
    await expect(page.getByTestId("receipt-approval")).toBeVisible({ timeout: 30_000 });
    await page.getByTestId("batch-receipt").scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, `approvals-receipt-${size}.png`) });
  }
  await page.setViewportSize(DESKTOP);
  await page.goto(`/threads/${thread}`);

  await alpha.getByRole("button", { name: "Approve", exact: true }).click();
  await expect(waiting.getByRole("heading", { name: "2 items need approval" })).toBeVisible();
  await waiting.getByRole("group", { name: "beta" }).getByRole("button", { name: "Deny", exact: true }).click();
  await expect(waiting.getByRole("heading", { name: "1 item needs approval" })).toBeVisible();
  // "Approve all N" counts what it approves, and tells the server how many the person saw.
  const approveAll = waiting.getByRole("button", { name: /^Approve all/ });
  await expect(approveAll).toHaveAccessibleName(/^Approve all 1\s*count_text$/);
  const [sent] = await Promise.all([page.waitForRequest((r) => r.method() === "POST" && r.url().endsWith(`/${batchId}/approvals`)), approveAll.click()]);
  expect(sent.postDataJSON()).toEqual({ tool: "count_text", decision: "approve", seen: 1 });
  await expect(waiting).toHaveCount(0);
  await expect.poll(async () => (await batchState(page)).status, { timeout: 90_000 }).toBe("completed");
  expect((await batchState(page)).counts).toMatchObject({ succeeded: 3, awaiting_approval: 0 });
  const items = await page.request.get(`/api/threads/${thread}/subagent-batches/${batchId}/results.jsonl`);
  const lines = (await items.text())
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { item_key: string; result: string });
  expect(lines.find((l) => l.item_key === "beta")!.result).toContain("denied by the user");
  expect(lines.find((l) => l.item_key === "alpha")!.result).toContain('"words":4');
});
