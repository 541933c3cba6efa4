import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * Messages sent while the lead agent answers (chat.busy_policy enqueue, the default): the
 * composer queues them, they show as queued across reloads, and the lead answers them in
 * order, one response each, streamed into the open tab without a reload.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `busy-${name}.png`), fullPage: true });
const assistant = (page: Page) => page.locator('article[data-role="assistant"]');
const userMessages = (page: Page) => page.locator('article[data-role="user"]');
const queued = (page: Page) => page.getByRole("article", { name: "Your message, queued" });
const composer = (page: Page) => page.getByRole("textbox", { name: "Message", exact: true });

for (const viewport of [
  { name: "desktop", width: 1400, height: 900 },
  { name: "phone", width: 390, height: 844 },
]) {
  test(`${viewport.name}: a message sent while the lead answers is queued, stays queued across a reload, and is answered in order`, async ({
    page,
  }) => {
    await page.setViewportSize({ width: viewport.width, height: viewport.height });
    await signedInAccount(page, `busy-${viewport.name}`);
    const threadId = await createThreadViaApi(page);
    await page.goto(`/threads/${threadId}`);

    // Slow enough that the queue, a screenshot and a reload all happen while it runs (a loaded machine included).
    await composer(page).fill("Write a slow answer [[sleep:8000]]");
    await page.keyboard.press("Enter");
    await expect(page.getByRole("button", { name: "Stop" })).toBeVisible();

    // While it runs, the composer queues: the message shows at once, marked, after the reply.
    await composer(page).fill("[[echo]] The second answer.");
    await page.getByRole("button", { name: "Queue" }).click();
    await expect(composer(page)).toHaveValue("");
    await expect(queued(page)).toHaveCount(1);
    await expect(queued(page)).toContainText("The second answer.");
    await expect(queued(page).getByText("Queued", { exact: true })).toBeVisible();
    // Stored queued on the server: the thread says so.
    await expect
      .poll(async () => {
        const body = await (await page.request.get(`/api/threads/${threadId}`)).json();
        return body.messages.find((m: { metadata?: { queued?: boolean } }) => m.metadata?.queued)?.metadata;
      })
      .toEqual({ queued: true, position: 1 });
    await shot(page, `${viewport.name}-01-queued`);

    // A reload while the first reply still runs: the message is still queued, below the reply.
    await page.reload();
    await expect(queued(page)).toHaveCount(1);
    await expect(queued(page).getByText("Queued", { exact: true })).toBeVisible();
    await expect(assistant(page)).toHaveCount(1);
    await shot(page, `${viewport.name}-02-queued-after-reload`);

    // Its turn comes without a reload: the mark goes, and its own reply streams in after the first.
    await expect(queued(page)).toHaveCount(0, { timeout: 30_000 });
    await expect(assistant(page)).toHaveCount(2, { timeout: 30_000 });
    await expect(assistant(page).nth(1)).toHaveText(/The second answer\./, { timeout: 30_000 });
    await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 30_000 });
    const order = await page.locator("article[data-role]").evaluateAll((els) =>
      els.map((el) => `${el.getAttribute("data-role")}:${(el.textContent ?? "").slice(0, 40)}`),
    );
    expect(order.map((o) => o.split(":")[0])).toEqual(["user", "assistant", "user", "assistant"]);
    expect(order[0]).toContain("Write a slow answer");
    expect(order[2]).toContain("The second answer.");
    await expect(userMessages(page).nth(1)).not.toHaveAttribute("data-queued", "");
    await shot(page, `${viewport.name}-03-answered`);

    // And stored in that order, one reply each.
    const body = await (await page.request.get(`/api/threads/${threadId}`)).json();
    expect(body.messages.map((m: { role: string }) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    expect(body.messages[2].metadata ?? null).toBeNull();
    await page.reload();
    await expect(assistant(page)).toHaveCount(2);
    await expect(queued(page)).toHaveCount(0);
  });
}

test("two queued messages are answered one after the other; Stop stops only the running reply", async ({ page }) => {
  await signedInAccount(page, "busy-two");
  const threadId = await createThreadViaApi(page);
  await page.goto(`/threads/${threadId}`);
  await composer(page).fill("Long one [[chars:3000]] [[sleep:6000]]");
  await page.keyboard.press("Enter");
  await expect(page.getByRole("button", { name: "Stop" })).toBeVisible();
  await composer(page).fill("[[echo]] Reply two.");
  await page.keyboard.press("Enter");
  await composer(page).fill("[[echo]] Reply three. [[sleep:1500]]");
  await page.keyboard.press("Enter");
  await expect(queued(page)).toHaveCount(2);
  await expect(queued(page).nth(0)).toContainText("Reply two.");
  await expect(queued(page).nth(1)).toContainText("Reply three.");

  // Stop ends the running reply; the queued messages are the person's and keep their turn.
  await expect(assistant(page)).toHaveCount(1);
  await page.getByRole("button", { name: "Stop" }).click();
  await expect(assistant(page).first().getByText("Stopped", { exact: true })).toBeVisible();
  await expect(assistant(page)).toHaveCount(3, { timeout: 40_000 });
  await expect(assistant(page).nth(1)).toHaveText(/Reply two\./);
  await expect(assistant(page).nth(2)).toHaveText(/Reply three\./, { timeout: 30_000 });
  await expect(queued(page)).toHaveCount(0);
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 30_000 });
  const body = await (await page.request.get(`/api/threads/${threadId}`)).json();
  expect(
    body.messages.map((m: { role: string; parts: Array<{ type: string; text?: string }> }) =>
      m.role === "user" ? m.parts.map((p) => p.text).join("") : m.role,
    ),
  ).toEqual(["Long one [[chars:3000]] [[sleep:6000]]", "assistant", "[[echo]] Reply two.", "assistant", "[[echo]] Reply three. [[sleep:1500]]", "assistant"]);
});
