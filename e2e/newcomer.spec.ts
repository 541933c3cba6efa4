import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, pendingSetupCode, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * What a newcomer meets first, in real Chromium against the production build: the sign-in page
 * of a deployment with no account says where the first one comes from (the Setup link in the
 * server's log), and the keyboard reaches the message box past the thread list: a skip link
 * first, then one tab stop per thread, its actions behind Shift+F10.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

async function shots(page: Page, name: string) {
  for (const [size, viewport] of [["desktop", DESKTOP], ["phone", PHONE]] as const) {
    await page.setViewportSize(viewport);
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, `newcomer-${name}-${size}.png`) });
  }
  await page.setViewportSize(DESKTOP);
}

test("the sign-in page of a fresh deployment says how to create the first account, and says nothing once one exists", async ({ browser }) => {
  const page = await browser.newPage({ viewport: DESKTOP });
  const hint = page.getByTestId("first-account-hint");
  // Run first on a fresh server (npx playwright test e2e/newcomer.spec.ts), no account exists yet.
  if (pendingSetupCode() !== undefined) {
    await page.goto("/signin");
    await expect(hint).toContainText("No account exists yet.");
    await expect(hint).toContainText("Setup: http://…/register?setup=…");
    await expect(hint).toContainText("npm run --silent cli -- setup-code");
    await expect(hint.getByRole("link", { name: "create the first account" })).toHaveAttribute("href", "/register");
    await shots(page, "signin-first");
    // The first account (through the Setup link, as the hint says).
    await signedInAccount(page, "newcomer");
  }
  const later = await browser.newPage({ viewport: DESKTOP });
  await later.goto("/signin");
  await expect(later.getByRole("heading", { name: "Sign in" })).toBeVisible();
  await expect(later.getByTestId("first-account-hint")).toHaveCount(0);
  await later.close();
  await page.close();
});

test("Tab: a skip link to the message box first, then one stop per thread; a thread's actions open with Shift+F10", async ({ browser }) => {
  const page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "keyboard");
  const threads: string[] = [];
  for (const title of ["Alpha", "Bravo", "Charlie", "Delta"]) threads.push(await createThreadViaApi(page, title));
  await page.goto(`/threads/${threads[0]}`);
  const composer = page.getByRole("textbox", { name: "Message" });
  await expect(composer).toBeVisible();

  await page.keyboard.press("Tab");
  const skip = page.getByRole("link", { name: "Skip to the message box" });
  await expect(skip).toBeFocused();
  await shots(page, "skip-link");
  await page.setViewportSize(DESKTOP);
  await skip.focus();
  await page.keyboard.press("Enter");
  await expect(composer).toBeFocused();

  // Without the skip link: every stop up to the message box, each thread row once.
  await page.goto(`/threads/${threads[0]}`);
  await expect(composer).toBeVisible();
  const stops: { row: string | null; label: string | null }[] = [];
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press("Tab");
    const at = await page.evaluate(() => {
      const el = document.activeElement as HTMLElement | null;
      return {
        row: el?.closest('[data-testid="thread-row"]')?.querySelector(".truncate")?.textContent ?? null,
        label: el?.getAttribute("aria-label") ?? null,
      };
    });
    stops.push(at);
    if (at.label === "Message") break;
  }
  expect(stops.at(-1)?.label).toBe("Message");
  const rowStops = stops.filter((s) => s.row !== null).map((s) => s.row);
  expect(rowStops.sort()).toEqual(["Alpha", "Bravo", "Charlie", "Delta"]);
  expect(stops.some((s) => s.label === "Thread actions")).toBe(false);

  // A thread's Rename and Delete from the keyboard.
  const bravo = page.getByTestId("thread-row").filter({ hasText: "Bravo" });
  await bravo.getByRole("link").focus();
  await page.keyboard.press("Shift+F10");
  await expect(bravo.getByRole("menu")).toBeVisible();
  await expect(bravo.getByRole("menuitem", { name: "Rename" })).toBeFocused();
  await shots(page, "row-menu");
  await page.keyboard.press("Escape");
  await expect(bravo.getByRole("menu")).toHaveCount(0);
  await page.close();
});
