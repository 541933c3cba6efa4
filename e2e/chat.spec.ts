import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { newAccount, registerViaUI, signInViaUI, signOutViaUI } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * The chat walking skeleton in a real browser against the production build: accounts,
 * threads, a streamed simulator reply that survives reload, Stop, sign-out, and owner scoping.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `chat-${name}.png`), fullPage: true });

const assistant = (page: Page) => page.locator('article[data-role="assistant"]');

test("signed-out pages redirect to sign-in; API routes answer 401 JSON", async ({ page }) => {
  await page.goto("/threads/00000000-0000-0000-0000-000000000000");
  await expect(page).toHaveURL(/\/signin\?callbackUrl=%2Fthreads%2F00000000/);
  await expect(page.getByRole("heading", { name: "Sign in" })).toBeVisible();
  const api = await page.request.get("/api/threads");
  expect(api.status()).toBe(401);
  expect((await api.json()).error.code).toBe("unauthorized");
});

test("register, chat with the simulator, reload, stop, sign out; another user gets 404", async ({ page, browser }) => {
  const alice = newAccount("alice");

  // Register (signs in right away) and land on the empty state.
  await page.goto("/register");
  await shot(page, "01-register");
  await registerViaUI(page, alice);
  await expect(page.getByRole("heading", { name: "Start a conversation" })).toBeVisible();
  await shot(page, "02-empty-state");

  // Sign out and back in.
  await signOutViaUI(page);
  await shot(page, "03-signin");
  await signInViaUI(page, alice);
  await expect(page.getByRole("heading", { name: "Start a conversation" })).toBeVisible();

  // New thread from the empty state.
  await page.getByRole("main").getByRole("button", { name: "New thread" }).click();
  await expect(page).toHaveURL(/\/threads\/[0-9a-f-]{36}$/);
  const threadUrl = page.url();
  const threadId = threadUrl.split("/").pop()!;
  await expect(page.getByTestId("simulator-badge")).toContainText("Lead: Simulator");
  await expect(page.getByRole("navigation").getByRole("link", { name: /New thread/ })).toBeVisible();

  // Send a message; the reply streams in over ~2.5 s ([[sleep]] spreads the simulator's deltas).
  await page.getByRole("textbox", { name: "Message", exact: true }).fill("Plan a picnic for four [[sleep:2500]]");
  await page.keyboard.press("Enter");
  await expect(page.locator('article[data-role="user"]')).toHaveText("Plan a picnic for four [[sleep:2500]]");
  const reply = assistant(page).last();
  await expect(page.getByRole("button", { name: "Stop" })).toBeVisible();
  await expect(reply).toContainText("Simulated answer", { timeout: 10_000 });
  const early = (await reply.textContent()) ?? "";
  await shot(page, "04-streaming");
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 15_000 });
  const full = (await reply.textContent()) ?? "";
  expect(full.length).toBeGreaterThan(early.length); // it grew while we watched: streamed, not one blob
  await expect(reply).toContainText('Simulated answer to "Plan a picnic for four".');
  // The first message names the thread in the sidebar.
  await expect(page.getByRole("navigation").getByRole("link", { name: /Plan a picnic for four/ })).toBeVisible();

  // Reload: both messages come back from Postgres.
  await page.reload();
  await expect(page.locator('article[data-role="user"]')).toHaveText("Plan a picnic for four [[sleep:2500]]");
  await expect(assistant(page)).toHaveCount(1);
  expect(await assistant(page).first().textContent()).toBe(full);
  await shot(page, "05-persisted");

  // Stop a long reply halfway; what streamed is kept and marked as stopped.
  await page.getByRole("textbox", { name: "Message", exact: true }).fill("Tell me a long story [[chars:3000]] [[sleep:12000]]");
  await page.getByRole("button", { name: "Send" }).click();
  const story = assistant(page).nth(1);
  await expect
    .poll(async () => ((await story.textContent()) ?? "").length, { timeout: 15_000 })
    .toBeGreaterThan(80);
  await page.getByRole("button", { name: "Stop" }).click();
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible();
  await page.waitForTimeout(500);
  await page.reload();
  const stopped = assistant(page).nth(1);
  await expect(stopped.getByText("Stopped", { exact: true })).toBeVisible();
  const kept = ((await stopped.textContent()) ?? "").replace(/^Lead agentStopped/, "");
  expect(kept).toContain("Simulated answer to");
  expect(kept.length).toBeLessThan(3000);
  await shot(page, "06-stopped");

  // The API agrees with the page.
  const api = await page.request.get(`/api/threads/${threadId}`);
  expect(api.status()).toBe(200);
  const body = await api.json();
  expect(body.messages.map((m: { role: string }) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
  expect(body.messages[3].metadata.status).toBe("cancelled");

  // Narrow window: the sidebar folds into a drawer.
  await page.setViewportSize({ width: 420, height: 820 });
  await expect(page.getByRole("button", { name: /Threads/ })).toBeVisible();
  await shot(page, "07-narrow");
  await page.getByRole("button", { name: /Threads/ }).click();
  await expect(page.getByRole("navigation").getByRole("link", { name: /Plan a picnic/ })).toBeVisible();
  await shot(page, "08-narrow-drawer");
  await page.setViewportSize({ width: 1400, height: 900 });
  await page.reload();

  await signOutViaUI(page);
  await page.goto(threadUrl);
  await expect(page).toHaveURL(/\/signin/);

  // A second user in a fresh browser context: 404 on the page and on the API.
  const other = await browser.newContext();
  const bobPage = await other.newPage();
  await registerViaUI(bobPage, newAccount("bob"));
  const res = await bobPage.goto(threadUrl);
  expect(res?.status()).toBe(404);
  await expect(bobPage.getByRole("heading", { name: "Not found" })).toBeVisible();
  await expect(bobPage.getByText("Plan a picnic")).toHaveCount(0);
  await shot(bobPage, "09-foreign-thread-404");
  const foreign = await bobPage.request.get(`/api/threads/${threadId}`);
  expect(foreign.status()).toBe(404);
  expect(await foreign.json()).toEqual({ error: { code: "not_found", message: "thread not found" } });
  const foreignChat = await bobPage.request.post(`/api/threads/${threadId}/chat`, {
    data: { message: { id: "bob-msg-1", role: "user", parts: [{ type: "text", text: "hi" }] } },
  });
  expect(foreignChat.status()).toBe(404);
  const list = await (await bobPage.request.get("/api/threads")).json();
  expect(list.threads.map((t: { id: string }) => t.id)).not.toContain(threadId);
  await other.close();
});
