import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { CHAT_MAX_TEXT_CHARS } from "@/lib/api/chat";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The chat as a new user meets it, in real Chromium against the production build: the first
 * minute (example prompts, the Simulator badge, "What can you do?" as markdown), a reply that
 * survives a reload mid-task, a second tab's message queued behind a running reply,
 * rename and delete, a finished batch that tells its failures and inputs, and the phone layout.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `chatx-${name}.png`), fullPage: true });
const assistant = (page: Page) => page.locator('article[data-role="assistant"]');
const composer = (page: Page) => page.getByRole("textbox", { name: "Message", exact: true });
const MOBILE = { width: 390, height: 844 };

/** The composer's bottom edge is within 24 px of the viewport's bottom. */
async function expectComposerAtBottom(page: Page) {
  const box = await page.getByTestId("composer").boundingBox();
  const height = page.viewportSize()!.height;
  expect(box, "composer is rendered").not.toBeNull();
  expect(height - (box!.y + box!.height)).toBeLessThanOrEqual(24);
  expect(box!.y + box!.height).toBeLessThanOrEqual(height + 1);
}

test.afterAll(async () => {
  await stopAllWorkers();
});

test("first minute: example prompts, the Simulator badge, and 'What can you do?' rendered as markdown", async ({ page }) => {
  await signedInAccount(page, "first");
  const threadId = await createThreadViaApi(page);
  await page.goto(`/threads/${threadId}`);
  const examples = page.getByTestId("example-prompt");
  await expect(examples).toHaveCount(4);
  await expect(page.getByTestId("example-new-batch")).toBeVisible();
  await shot(page, "01-empty-thread");

  await page.getByTestId("simulator-badge").click();
  await expect(page.getByRole("note")).toContainText("MODEL_BASE_URL");
  await page.getByTestId("simulator-badge").click();

  // Without a worker the batch example says what is needed instead of doing nothing.
  await page.getByTestId("example-new-batch").click();
  await expect(page.getByText("Batches need a worker")).toBeVisible();

  await examples.filter({ hasText: "What can you do?" }).click();
  await expect(composer(page)).toHaveValue("What can you do?");
  await page.keyboard.press("Enter");
  const reply = assistant(page).last();
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 15_000 });
  // Markdown: a list, bold text and inline code, not raw asterisks and backticks.
  await expect(reply.locator("ul > li")).toHaveCount(5);
  await expect(reply.locator('strong, [data-streamdown="strong"]').first()).toHaveText("One sub-agent:");
  await expect(reply.locator("code").filter({ hasText: "batch status" })).toBeVisible();
  await expect(reply).not.toContainText("**");
  await shot(page, "02-what-can-you-do");

  await page.setViewportSize(MOBILE);
  await expectComposerAtBottom(page);
  await shot(page, "03-what-can-you-do-mobile");
});

test("a reply keeps running across a reload mid-task and ends as a finished card, never 'cancelled'", async ({ page }) => {
  await signedInAccount(page, "reload");
  const threadId = await createThreadViaApi(page);
  await page.goto(`/threads/${threadId}`);
  await composer(page).fill("task: describe the tides of Lisbon [[sleep:4000]]");
  await page.keyboard.press("Enter");
  const card = page.getByTestId("subagent-card");
  await expect(card).toHaveAttribute("data-status", "running", { timeout: 15_000 });
  await shot(page, "04-task-running");

  await page.reload();
  // Reattached: the card comes back from the running stream and finishes.
  await expect(page.getByTestId("subagent-card")).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  await expect(assistant(page).last()).toContainText("The general sub-agent finished:", { timeout: 15_000 });
  await expect(page.getByText(/cancelled|ResponseAborted/i)).toHaveCount(0);
  await shot(page, "05-task-finished-after-reload");

  // And stored: another reload shows the same finished card.
  await page.reload();
  await expect(page.getByTestId("subagent-card")).toHaveAttribute("data-status", "completed");
  await expect(page.getByText(/cancelled|ResponseAborted/i)).toHaveCount(0);
  const body = await (await page.request.get(`/api/threads/${threadId}`)).json();
  expect(body.messages.map((m: { role: string }) => m.role)).toEqual(["user", "assistant"]);
  expect(body.messages[1].metadata.status).toBe("completed");
});

test("a second message from another tab while one runs is queued, and the other tab follows the running reply", async ({ page, context }) => {
  await signedInAccount(page, "busy");
  const threadId = await createThreadViaApi(page);
  // The same thread open in a second tab before the first message goes out.
  const other = await context.newPage();
  await other.goto(`/threads/${threadId}`);
  await expect(other.getByTestId("example-prompt").first()).toBeVisible();
  await page.goto(`/threads/${threadId}`);
  await composer(page).fill("Write a long story [[chars:2000]] [[sleep:6000]]");
  await page.keyboard.press("Enter");
  await expect(assistant(page).last()).toContainText("Simulated answer", { timeout: 15_000 });

  // The second tab's message waits for the thread (202, chat.busy_policy enqueue): shown queued.
  await composer(other).fill("Are you still there?");
  await other.keyboard.press("Enter");
  await expect(other.getByRole("article", { name: "Your message, queued" })).toContainText("Are you still there?");
  await expect(composer(other)).toHaveValue("");
  // And it follows the running reply of the first tab.
  await expect(other.locator('article[data-role="user"]', { hasText: "Write a long story" })).toBeVisible();
  await expect(assistant(other).first()).toContainText("Simulated answer to");
  await shot(other, "06-busy-queued");
  await other.close();

  // The first tab got its whole reply (and may follow the queued message's reply after it).
  await expect.poll(async () => ((await assistant(page).first().textContent()) ?? "").length, { timeout: 20_000 }).toBeGreaterThan(2000);
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 20_000 });

  // Too long: refused before sending, with the limit in words; nothing is lost.
  const long = "x".repeat(CHAT_MAX_TEXT_CHARS + 1);
  await composer(page).fill(long);
  await expect(page.getByTestId("composer-notice")).toContainText("words");
  await expect(page.getByRole("button", { name: "Send" })).toBeDisabled();
  await page.keyboard.press("Enter");
  expect((await composer(page).inputValue()).length).toBe(CHAT_MAX_TEXT_CHARS + 1);
  await expect(page.locator('article[data-role="user"]', { hasText: "x".repeat(100) })).toHaveCount(0);
  await shot(page, "07-too-long");
});

test("Stop shows 'Stopped' at once, without a reload", async ({ page }) => {
  await signedInAccount(page, "stop");
  const threadId = await createThreadViaApi(page);
  await page.goto(`/threads/${threadId}`);
  await composer(page).fill("Tell me a long story [[chars:3000]] [[sleep:10000]]");
  await page.keyboard.press("Enter");
  await expect.poll(async () => ((await assistant(page).last().textContent()) ?? "").length, { timeout: 15_000 }).toBeGreaterThan(60);
  await page.getByRole("button", { name: "Stop" }).click();
  await expect(assistant(page).last().getByText("Stopped", { exact: true })).toBeVisible();
  await shot(page, "08-stopped-live");
});

test("rename and delete a thread from the sidebar", async ({ page }) => {
  await signedInAccount(page, "threads");
  const keep = await createThreadViaApi(page, "Keep me");
  const doomed = await createThreadViaApi(page, "Delete me");
  await page.goto(`/threads/${doomed}`);
  const nav = page.getByRole("navigation");

  const actions = (title: string) => page.getByTestId("thread-row").filter({ hasText: title }).getByRole("button", { name: "Thread actions" });
  await actions("Delete me").click();
  await page.getByRole("menuitem", { name: "Rename" }).click();
  await page.getByRole("textbox", { name: "Thread title" }).fill("Lisbon research");
  await page.keyboard.press("Enter");
  await expect(nav.getByRole("link", { name: /Lisbon research/ })).toBeVisible();
  await expect(page.getByRole("heading", { level: 1 })).toHaveText("Lisbon research");
  await page.reload();
  await expect(nav.getByRole("link", { name: /Lisbon research/ })).toBeVisible();
  await shot(page, "09-renamed");

  await actions("Lisbon research").click();
  await page.getByRole("menuitem", { name: "Delete…" }).click();
  const dialog = page.getByRole("alertdialog", { name: /Delete “Lisbon research”/ });
  await expect(dialog).toContainText("every batch of this thread with its results");
  await shot(page, "10-delete-confirm");
  await dialog.getByRole("button", { name: "Delete thread" }).click();
  await expect(nav.getByRole("link", { name: /Lisbon research/ })).toHaveCount(0);
  await expect(page).not.toHaveURL(new RegExp(doomed));
  expect((await page.request.get(`/api/threads/${doomed}`)).status()).toBe(404);
  expect((await page.request.get(`/api/threads/${keep}`)).status()).toBe(200);
});

test("phone: the composer of a new thread sits at the bottom and no empty panel takes room", async ({ page }) => {
  await page.setViewportSize(MOBILE);
  await signedInAccount(page, "phone");
  const threadId = await createThreadViaApi(page);
  await page.goto(`/threads/${threadId}`);
  await expect(page.getByTestId("example-prompt").first()).toBeVisible();
  await expectComposerAtBottom(page);
  await expect(page.getByTestId("batches-drawer-toggle")).toHaveCount(0);
  await shot(page, "14-mobile-new-thread");
});

test("an empty thread takes no room on either layout; a file attached in the chat brings the Files section back", async ({ page }) => {
  await page.setViewportSize(MOBILE);
  await signedInAccount(page, "phone-file");
  const threadId = await createThreadViaApi(page);
  await page.goto(`/threads/${threadId}`);
  await expect(page.getByTestId("example-prompt").first()).toBeVisible();
  await expect(page.getByTestId("batches-drawer-toggle")).toHaveCount(0);
  await page.setViewportSize({ width: 1400, height: 900 });
  // No worker and no files: no right-hand column beside the chat.
  await expect(page.locator("#batch-panel-slot")).toBeHidden();
  await shot(page, "15-desktop-new-thread");

  const chooser = page.waitForEvent("filechooser");
  await page.getByRole("button", { name: "Attach files" }).click();
  await (await chooser).setFiles([{ name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("some notes\n") }]);
  const files = page.getByRole("region", { name: "Files" });
  await expect(files.getByTestId("file-row")).toHaveCount(1);
  await expect(files).toBeVisible();
  await shot(page, "16-desktop-thread-with-file");

  await page.setViewportSize(MOBILE);
  await page.reload();
  const toggle = page.getByTestId("batches-drawer-toggle");
  await expect(toggle).toBeVisible();
  await expectComposerAtBottom(page);
  await shot(page, "17-mobile-thread-with-file");
  await toggle.click();
  await expect(files.getByTestId("file-row")).toHaveCount(1);
  await expect(files).toBeInViewport();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "chatx-18-mobile-files-drawer.png") });
});

test("a finished batch with failures says so in amber and shows each item's input; the phone layout keeps the composer down", async ({
  page,
}) => {
  test.setTimeout(120_000);
  await startWorker();
  await signedInAccount(page, "amber");
  const threadId = await createThreadViaApi(page, "Cities");
  const res = await page.request.post(`/api/threads/${threadId}/subagent-batches`, {
    data: {
      submission_key: `cities-${Date.now()}`,
      prompt_template: "Describe {{item}} in one line",
      items: ["Lisbon", "Oslo [[fail]]", "Nairobi", "Lima [[fail]]", "Osaka"],
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  await page.goto(`/threads/${threadId}`);
  const detail = page.getByTestId("batch-detail");
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
  const badge = detail.locator('[data-status="completed"][data-tone="warn"]');
  await expect(badge).toHaveText("completed · 2 failed");
  await expect(badge).toHaveClass(/bg-amber-50/);
  await expect(detail.getByTestId("progress-text")).toHaveText("3 / 5 done · 2 failed");
  await expect(detail.getByTestId("count-succeeded")).toHaveText("3");
  // Inputs: which city failed is visible on the row and in its detail.
  const failedRow = detail.locator('[data-testid="item-row"][data-status="failed"]').first();
  await expect(failedRow.getByTestId("item-input")).toHaveText("Oslo [[fail]]");
  await failedRow.getByRole("button", { name: "Oslo [[fail]]", exact: true }).click();
  await expect(detail.getByTestId("item-detail-input").first()).toContainText("Oslo [[fail]]");
  const jsonl = await (await page.request.get(`/api/threads/${threadId}/subagent-batches/${await detail.getAttribute("data-batch-id")}/results.jsonl`)).text();
  expect(jsonl.trim().split("\n").map((l) => JSON.parse(l).input)).toEqual(["Lisbon", "Oslo [[fail]]", "Nairobi", "Lima [[fail]]", "Osaka"]);
  await shot(page, "11-batch-amber-inputs");

  // Phone: the panel is a drawer; the composer stays at the bottom.
  await page.setViewportSize(MOBILE);
  await expectComposerAtBottom(page);
  await shot(page, "12-mobile-drawer-closed");
  await page.getByTestId("batches-drawer-toggle").click();
  await expect(page.getByTestId("batch-detail")).toBeVisible();
  await shot(page, "13-mobile-drawer-open");
});
