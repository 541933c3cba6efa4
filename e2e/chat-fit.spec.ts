import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { E2E_PORT } from "../playwright.config";
import { createThreadViaApi, newAccount, registerViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * A chat that fits the person using it (issue #23): a thread opens at its newest message and
 * follows a streaming reply, very long messages collapse, sign-out stays on the host the person
 * came through, menus and drawers close like menus, New thread reuses a blank one, the phone has
 * one header row, and once-only secrets have a Copy button.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const MOBILE = { width: 390, height: 844 };
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `fit-${name}.png`) });
const transcript = (page: Page) => page.getByTestId("transcript");
const assistant = (page: Page) => page.locator('article[data-role="assistant"]');

/** Pixels between the transcript's visible bottom and its content's end. */
const distanceToBottom = (page: Page) =>
  transcript(page).evaluate((el) => Math.round(el.scrollHeight - el.scrollTop - el.clientHeight));

/** Sends one user message through the chat API and waits for the whole streamed reply. */
async function say(page: Page, threadId: string, text: string): Promise<void> {
  const id = `u_${Math.random().toString(36).slice(2)}${Date.now().toString(36)}`;
  const res = await page.request.post(`/api/threads/${threadId}/chat`, {
    data: { message: { id, role: "user", parts: [{ type: "text", text }] } },
    timeout: 60_000,
  });
  expect(res.status(), await res.text()).toBe(200);
}

/** A thread with a dozen exchanges, a 50,000-character message in the middle and a 50,000-character reply last. */
async function longThread(page: Page): Promise<string> {
  const threadId = await createThreadViaApi(page, "Long thread");
  for (let i = 1; i <= 5; i++) await say(page, threadId, `Early question ${i}`);
  await say(page, threadId, `Pasted report: ${"lorem ipsum dolor sit amet ".repeat(1852)}`.slice(0, 50_000));
  for (let i = 6; i <= 10; i++) await say(page, threadId, `Later question ${i}`);
  await say(page, threadId, "[[chars:50000]] Write the full appendix");
  return threadId;
}

test("a long thread opens at its newest message; 50,000-character messages are collapsed behind Show more", async ({ page }) => {
  await signedInAccount(page, "long");
  const threadId = await longThread(page);
  for (const size of [{ width: 1400, height: 900 }, MOBILE]) {
    await page.setViewportSize(size);
    await page.goto(`/threads/${threadId}`);
    const last = assistant(page).last();
    await expect(last).toBeInViewport();
    await expect.poll(() => distanceToBottom(page)).toBeLessThanOrEqual(2);
    await expect(page.locator('article[data-role="user"]').first()).not.toBeInViewport();
    // Both long messages are short on screen until asked.
    await expect(page.getByRole("button", { name: /Show more/ })).toHaveCount(2);
    expect(await transcript(page).evaluate((el) => el.scrollHeight)).toBeLessThan(30_000);
    await expect(page.getByRole("button", { name: "Jump to latest" })).toHaveCount(0);
    await shot(page, `01-long-thread-${size.width}`);
  }
  await page.setViewportSize({ width: 1400, height: 900 });
  const newest = assistant(page).last();
  await newest.getByRole("button", { name: /Show more/ }).click();
  await expect(newest.getByRole("button", { name: "Show less" })).toBeVisible();
  expect((await newest.textContent())?.length ?? 0).toBeGreaterThanOrEqual(49_000);
});

test("a streaming reply stays pinned to the bottom; after scrolling up, Jump to latest brings it back", async ({ page }) => {
  await signedInAccount(page, "pinned");
  const threadId = await createThreadViaApi(page, "Pinned");
  for (let i = 1; i <= 8; i++) await say(page, threadId, `Warm-up question ${i}`);
  await page.goto(`/threads/${threadId}`);
  await expect.poll(() => distanceToBottom(page)).toBeLessThanOrEqual(2);

  // About 8,000 characters arriving over 8 seconds.
  await page.getByRole("textbox", { name: "Message", exact: true }).fill("[[chars:8000]] [[sleep:8000]] Tell me a long story");
  await page.keyboard.press("Enter");
  const streaming = page.locator('article[data-role="assistant"][aria-busy="true"]');
  await expect(streaming).toBeVisible();
  const growth: number[] = [];
  for (let i = 0; i < 6; i++) {
    await page.waitForTimeout(400);
    growth.push(await transcript(page).evaluate((el) => el.scrollHeight));
    // Pinned: the newest words are on screen while they arrive. Measured after a painted frame;
    // a streamed delta may still land between that frame and the measurement, so the slack is
    // the list's own "at the bottom" distance (unpinned, the gap grows by hundreds of px per sample).
    const gap = await transcript(page).evaluate(
      (el) =>
        new Promise<number>((resolve) =>
          requestAnimationFrame(() => setTimeout(() => resolve(Math.round(el.scrollHeight - el.scrollTop - el.clientHeight)), 0)),
        ),
    );
    expect(gap).toBeLessThanOrEqual(80);
  }
  expect(growth[growth.length - 1]).toBeGreaterThan(growth[0]);

  // The reader scrolls up to re-read: the list leaves them there and offers the way back.
  await transcript(page).hover();
  await page.mouse.wheel(0, -900);
  const jump = page.getByRole("button", { name: "Jump to latest" });
  await expect(jump).toBeVisible();
  const readingAt = await transcript(page).evaluate((el) => el.scrollTop);
  await page.waitForTimeout(800);
  expect(await transcript(page).evaluate((el) => el.scrollTop)).toBe(readingAt);
  expect(await distanceToBottom(page)).toBeGreaterThan(300);
  await shot(page, "02-jump-to-latest-1400");
  await jump.click();
  await expect(jump).toHaveCount(0);
  // Still streaming: a delta can land between the jump and a measurement (the same slack as
  // above); left where the reader was, the distance would stay above 300 px.
  await expect.poll(() => distanceToBottom(page), { timeout: 2_000 }).toBeLessThanOrEqual(2);
  await expect(streaming).toHaveCount(0, { timeout: 20_000 });
  await expect.poll(() => distanceToBottom(page)).toBeLessThanOrEqual(2);

  await page.setViewportSize(MOBILE);
  await transcript(page).hover();
  await page.mouse.wheel(0, -900);
  await expect(jump).toBeVisible();
  await shot(page, "02-jump-to-latest-390");
});

test("sign-out lands on /signin of the host the person came through", async ({ page }) => {
  const account = newAccount("host");
  await registerViaApi(page.request, account);
  const other = `http://127.0.0.1:${E2E_PORT}`;
  // Signed out: the page sends the person to sign-in on this host.
  await page.goto(`${other}/settings`);
  await expect(page).toHaveURL(`${other}/signin?callbackUrl=%2Fsettings`);
  await page.getByLabel("Email").fill(account.email);
  await page.getByLabel("Password").fill(account.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(`${other}/settings`);
  await page.getByRole("button", { name: "Sign out", exact: true }).click();
  await expect(page).toHaveURL(`${other}/signin`);
  await expect(page.getByRole("button", { name: "Sign in" })).toBeVisible();
});

test("the thread menu and the phone's drawers close on Escape and on a click outside; the sidebar shows the whole email", async ({
  page,
}) => {
  const account = await signedInAccount(page, "a-rather-long-mailbox-name-for-the-sidebar");
  const threadId = await createThreadViaApi(page, "Menu thread");
  await say(page, threadId, "Hello");
  await page.goto(`/threads/${threadId}`);

  const email = page.getByTestId("account-email");
  await expect(email).toHaveText(account.email);
  await expect(email).toBeVisible();
  expect(await email.evaluate((el) => el.scrollWidth <= el.clientWidth && el.scrollHeight <= el.clientHeight + 1)).toBe(true);

  const row = page.getByTestId("thread-row").filter({ hasText: "Menu thread" });
  const actions = row.getByRole("button", { name: "Thread actions" });
  const menu = row.getByRole("menu");
  await actions.click();
  await expect(menu).toBeVisible();
  await shot(page, "03-thread-menu-1400");
  await page.keyboard.press("Escape");
  await expect(menu).toHaveCount(0);
  await actions.click();
  await expect(menu).toBeVisible();
  await page.mouse.click(900, 400);
  await expect(menu).toHaveCount(0);
  // Still a working menu: Rename opens the editor.
  await actions.click();
  await menu.getByRole("menuitem", { name: "Rename" }).click();
  await expect(page.getByRole("textbox", { name: "Thread title" })).toBeVisible();
  await page.keyboard.press("Escape");

  // Phone: one header row (the thread's own, with the threads button), and the drawer closes like a drawer.
  await page.setViewportSize(MOBILE);
  const header = page.locator("[data-page-header]");
  await expect(header).toBeVisible();
  await expect(page.locator("[data-app-bar]")).toBeHidden();
  const box = await header.boundingBox();
  expect(box!.y).toBe(0);
  expect(box!.height).toBeLessThanOrEqual(56);
  await shot(page, "04-phone-one-header-390");
  const drawer = page.getByRole("complementary", { name: "Threads" });
  const toggle = header.getByRole("button", { name: "Threads" });
  await toggle.click();
  await expect(drawer).toBeVisible();
  await expect(drawer.getByTestId("account-email")).toHaveText(account.email);
  await shot(page, "05-phone-threads-drawer-390");
  await page.keyboard.press("Escape");
  await expect(drawer).toBeHidden();
  await toggle.click();
  await expect(drawer).toBeVisible();
  await page.mouse.click(370, 420);
  await expect(drawer).toBeHidden();
  // Pages without their own header keep the app bar with the same button.
  await page.goto("/settings");
  await expect(page.locator("[data-app-bar]")).toBeVisible();
  await page.locator("[data-app-bar]").getByRole("button", { name: "Threads" }).click();
  await expect(drawer).toBeVisible();
  await page.keyboard.press("Escape");
  await expect(drawer).toBeHidden();
});

test("New thread opens the newest thread while it is still blank instead of adding another", async ({ page }) => {
  await signedInAccount(page, "reuse");
  await page.goto("/");
  const newThread = page.getByRole("button", { name: "New thread" }).first();
  await newThread.click();
  await expect(page).toHaveURL(/\/threads\/[0-9a-f-]{36}$/);
  const blank = page.url();
  await expect(page.getByTestId("thread-row")).toHaveCount(1);
  await newThread.click();
  await page.waitForLoadState("networkidle");
  expect(page.url()).toBe(blank);
  await expect(page.getByTestId("thread-row")).toHaveCount(1);

  // Once something was said there, New thread makes a new one.
  await page.getByRole("textbox", { name: "Message", exact: true }).fill("First words");
  await page.keyboard.press("Enter");
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 15_000 });
  await newThread.click();
  await expect(page).not.toHaveURL(blank);
  await expect(page).toHaveURL(/\/threads\/[0-9a-f-]{36}$/);
  await expect(page.getByTestId("thread-row")).toHaveCount(2);
});

test("Settings: a new token is shown once with a Copy button; a missing name is said in words", async ({ page, context }) => {
  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  await signedInAccount(page, "copy");
  for (const size of [{ width: 1400, height: 900 }, MOBILE]) {
    await page.setViewportSize(size);
    await page.goto("/settings");
    await page.getByRole("button", { name: "Create token" }).click();
    const alert = page.getByRole("alert").filter({ hasText: /\w/ });
    await expect(alert).toHaveText("Token name must not be empty.");
    await page.getByLabel("Token name").fill(`laptop ${size.width}`);
    await page.getByRole("button", { name: "Create token" }).click();
    const secret = page.getByTestId("once-secret");
    const token = await secret.getByLabel("New token").inputValue();
    expect(token).toMatch(/^flt_/);
    await secret.getByRole("button", { name: "Copy" }).click();
    await expect(secret.getByRole("button", { name: "Copied" })).toBeVisible();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(token);
    await shot(page, `06-settings-token-copied-${size.width}`);
  }
});
