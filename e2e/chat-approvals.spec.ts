import { mkdirSync } from "node:fs";
import path from "node:path";
import { type BrowserContext, expect, type Locator, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";

/**
 * Approvals in the chat, in real Chromium against the production build and the simulator. The
 * e2e server (playwright.config.ts) has the lead's workspace tools with write_file needing a
 * person, a `gatekeeper` sub-agent whose clock calls need one, and a 30 s approval timeout. The
 * lead calls `task` and `agent_swarm` with the gatekeeper through the simulator's [[tool:...]].
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const TIMEOUT_SECONDS = 30;

const WRITE = 'Save the plan [[tool:write_file {"path":"plan.md","content":"Ship on Friday"}]]';
const CLOCK = "What time is it? [[tool:current_time {}]]";
const TASK = `[[tool:task ${JSON.stringify({ subagent: "gatekeeper", description: "Check the clock", prompt: CLOCK })}]]`;
const SWARM = `[[tool:agent_swarm ${JSON.stringify({ items: [{ item_id: "clock-a", profile: "gatekeeper", task: CLOCK }] })}]]`;

let context: BrowserContext;
let page: Page;

test.beforeAll(async ({ browser }) => {
  context = await browser.newContext({ viewport: DESKTOP });
  page = await context.newPage();
  await signedInAccount(page, "chat-approvals");
});

test.afterAll(async () => {
  await context?.close();
});

async function send(p: Page, text: string) {
  await p.getByRole("textbox", { name: "Message" }).fill(text);
  await p.keyboard.press("Enter");
}

/** Screenshots at both sizes; on the phone the card's buttons must be on screen. */
async function shots(p: Page, name: string, card?: Locator) {
  await p.setViewportSize(DESKTOP);
  await p.screenshot({ path: path.join(SCREENSHOT_DIR, `chat-approvals-${name}-desktop.png`) });
  await p.setViewportSize(PHONE);
  if (card) {
    await card.scrollIntoViewIfNeeded();
    for (const name of ["Approve", "Deny"]) {
      const button = card.getByRole("button", { name, exact: true });
      if (await button.count()) {
        const box = await button.boundingBox();
        expect(box!.x).toBeGreaterThanOrEqual(0);
        expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
      }
    }
  }
  await p.screenshot({ path: path.join(SCREENSHOT_DIR, `chat-approvals-${name}-phone.png`) });
  await p.setViewportSize(DESKTOP);
}

async function files(p: Page, thread: string): Promise<string[]> {
  const res = await p.request.get(`/api/threads/${thread}/files`);
  expect(res.status()).toBe(200);
  return ((await res.json()) as { files: { path: string }[] }).files.map((f) => f.path);
}

test("a lead call waits on a card with its arguments; Approve runs it and the reply goes on", async () => {
  const thread = await createThreadViaApi(page, "Lead approval");
  await page.goto(`/threads/${thread}`);
  await send(page, WRITE);
  const tool = page.locator('[data-tool="write_file"]');
  const card = tool.getByTestId("approval-card");
  await expect(card).toBeVisible({ timeout: 30_000 });
  await expect(card).toContainText("The lead agent wants to call");
  await expect(card.getByTestId("approval-arguments")).toContainText('"path": "plan.md"');
  await expect(card.getByTestId("approval-arguments")).toContainText('"content": "Ship on Friday"');
  expect(await files(page, thread)).toEqual([]);
  await shots(page, "lead-waiting", card);

  await card.getByRole("button", { name: "Approve", exact: true }).click();
  await expect(tool).toHaveAttribute("data-state", "output-available", { timeout: 30_000 });
  await expect(page.getByText("Ran 1 tool call.")).toBeVisible();
  expect(await files(page, thread)).toEqual(["plan.md"]);
  // A working approval looks like one: no error under the reply, now or once the page settles.
  await page.waitForTimeout(2_000);
  await expect(page.getByTestId("transcript").getByRole("alert")).toHaveCount(0);
  await expect(page.getByText(/No tool invocation found/)).toHaveCount(0);
  await shots(page, "lead-approved");
  // The decided reply is what a reload shows too.
  await page.reload();
  await expect(page.locator('[data-tool="write_file"]')).toHaveAttribute("data-state", "output-available");
  await expect(page.getByTestId("approval-card")).toHaveCount(0);
});

test("a task child's call: the card sits in its task card, is still there after a reload, and Deny reaches the child", async () => {
  const thread = await createThreadViaApi(page, "Task approval");
  await page.goto(`/threads/${thread}`);
  await send(page, TASK);
  const task = page.getByTestId("subagent-card");
  await expect(task.getByTestId("approval-card")).toBeVisible({ timeout: 30_000 });

  await page.reload();
  const card = page.getByTestId("subagent-card").getByTestId("approval-card");
  await expect(card).toBeVisible({ timeout: 30_000 });
  await expect(card).toContainText("A sub-agent wants to call");
  await expect(card).toContainText("current_time");
  await expect(card.getByTestId("approval-arguments")).toHaveText("(no arguments)");
  await shots(page, "task-waiting", card);

  await card.getByPlaceholder("Reason, if you deny (optional)").fill("not during the review");
  await card.getByRole("button", { name: "Deny", exact: true }).click();
  const done = page.getByTestId("subagent-card");
  await expect(done).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  const calls = done.getByTestId("tool-calls");
  await calls.locator("summary").first().click();
  const row = calls.getByTestId("tool-call").first();
  await expect(row).toHaveAttribute("data-status", "error");
  await row.locator("summary").click();
  await expect(row).toContainText("denied by the user: not during the review");
  await shots(page, "task-denied");
});

test("a swarm child's call is decided from a second tab; the first tab follows", async () => {
  const thread = await createThreadViaApi(page, "Swarm approval");
  await page.goto(`/threads/${thread}`);
  await send(page, SWARM);
  const first = page.getByTestId("swarm-card").getByTestId("approval-card");
  await expect(first).toBeVisible({ timeout: 30_000 });

  const second = await context.newPage();
  await second.goto(`/threads/${thread}`);
  const card = second.getByTestId("swarm-card").getByTestId("approval-card");
  await expect(card).toBeVisible({ timeout: 30_000 });
  await shots(second, "swarm-second-tab", card);
  await card.getByRole("button", { name: "Approve", exact: true }).click();
  await expect(card).toContainText("Approved");

  // The first tab: the card leaves (polled), the swarm finishes with the call run.
  await expect(first).toHaveCount(0, { timeout: 15_000 });
  const swarm = page.getByTestId("swarm-card");
  await expect(swarm).toHaveAttribute("data-status", "completed", { timeout: 30_000 });
  const calls = swarm.getByTestId("swarm-row").first().getByTestId("tool-calls");
  await calls.locator("summary").first().click();
  await expect(calls.getByTestId("tool-call").first()).toHaveAttribute("data-status", "ok");
  await shots(page, "swarm-first-tab");
  await second.close();
});

test("tools.approval_timeout_seconds denies a call nobody decides, and the reply says so", async () => {
  test.setTimeout(150_000);
  const thread = await createThreadViaApi(page, "Approval timeout");
  await page.goto(`/threads/${thread}`);
  await send(page, WRITE);
  const tool = page.locator('[data-tool="write_file"]');
  const card = tool.getByTestId("approval-card");
  await expect(card).toBeVisible({ timeout: 30_000 });
  await expect(card).toContainText("Without a decision, it is denied automatically at");
  await expect(tool).toHaveAttribute("data-state", "output-denied", { timeout: (TIMEOUT_SECONDS + 30) * 1000 });
  await expect(tool).toContainText(`denied by the user: no decision within ${TIMEOUT_SECONDS} s (tools.approval_timeout_seconds)`);
  await expect(page.getByText(`error: denied by the user: no decision within ${TIMEOUT_SECONDS} s`)).toBeVisible();
  expect(await files(page, thread)).toEqual([]);
  await shots(page, "timeout");
});
