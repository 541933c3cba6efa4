import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import { E2E_FAKE_ANTHROPIC_PORT, E2E_FAKE_MODELS, E2E_LABELER } from "../playwright.config";
import { type FakeAnthropic, startFakeAnthropic } from "../test/helpers/fake-anthropic";
import { addAnthropicBatches, type FakeBatches } from "../test/helpers/fake-provider-batches";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The provider batch lane in the panel, in real Chromium against the production build, a real
 * worker process and the fake Anthropic Message Batches API (test/helpers/fake-provider-batches.ts)
 * on the port the e2e server's "claude-fake" entry names (playwright.config.ts). A batch on the
 * "labeler" sub-agent, sent through the New batch dialog's Lane choice, shows its lane and its
 * provider batch at the provider with its answered count moving (the fake answers one request a
 * poll and holds the batch open), then, once the fake ends it, Done with every request answered
 * and the batch completed. At 1400×900 and in the 390×844 drawer, with screenshots of both.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const ITEMS = Array.from({ length: 40 }, (_, i) => `ticket ${i + 1}: the printer on floor ${i + 1} is jammed`);

let fake: FakeAnthropic;
let batches: FakeBatches;
let page: Page;
let thread: string;
let batchId: string;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const laneOf = (p: Page) => detailOf(p).getByTestId("batch-lane");
const shot = (p: Page, name: string) => p.screenshot({ path: path.join(SCREENSHOT_DIR, `provider-lane-${name}.png`), fullPage: true });

/** The provider batch row's "N sent · M answered", as numbers. */
async function sentAndAnswered(row: Locator): Promise<{ sent: number; answered: number }> {
  const m = /([\d,]+) sent · ([\d,]+) answered/.exec((await row.textContent()) ?? "");
  const n = (s: string | undefined) => (s === undefined ? -1 : Number(s.replace(/,/g, "")));
  return { sent: n(m?.[1]), answered: n(m?.[2]) };
}

test.beforeAll(async ({ browser }) => {
  fake = await startFakeAnthropic({ port: E2E_FAKE_ANTHROPIC_PORT, handler: () => ({ type: "text", text: "hardware", chunkDelayMs: 0 }) });
  // Held open, one request answered a poll: the panel can be seen while the counts move.
  batches = addAnthropicBatches(fake, { hold: true, perPoll: 1 });
  await startWorker({
    env: {
      FLOTILLA__MODELS: JSON.stringify(E2E_FAKE_MODELS),
      E2E_FAKE_ANTHROPIC_KEY: "e2e-fake-key",
      FLOTILLA__PROVIDER_BATCH__POLL_SECONDS: "0.5",
    },
  });
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "lane");
  thread = await createThreadViaApi(page, "Provider lane");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
  await fake?.close();
});

test("1400×900: the New batch dialog's Lane sends the batch to the provider; the panel shows the lane and its counts moving", async () => {
  await page.goto(`/threads/${thread}`);
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Label this ticket: {{item}}");
  await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.join("\n"));
  // The default sub-agent runs on the simulator: no lane to choose.
  const lane = dialog.getByRole("group", { name: "Lane" });
  await expect(lane).toHaveCount(0);
  await dialog.getByLabel("Sub-agent").selectOption(E2E_LABELER.name);
  await expect(lane).toBeVisible();
  await lane.getByRole("radio", { name: /^Provider batch/ }).check();
  const created = page.waitForResponse((r) => r.request().method() === "POST" && /\/subagent-batches$/.test(new URL(r.url()).pathname));
  await dialog.getByRole("button", { name: "Start batch" }).click();
  const res = await created;
  expect(res.status()).toBe(201);
  expect(res.request().postDataJSON()).toMatchObject({ subagent: E2E_LABELER.name, lane: "provider_batch" });
  batchId = ((await res.json()) as { id: string }).id;
  await expect(dialog).toHaveCount(0);

  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-batch-id", batchId);
  await expect(detail.getByTestId("batch-lane-badge")).toHaveText("lane provider batch");
  await expect(laneOf(page)).toContainText("Provider batch lane: items go through Anthropic Message Batches at the batch price");
  const row = laneOf(page).getByTestId("provider-batch");
  await expect(row).toHaveCount(1);
  await expect(row).toHaveAttribute("data-state", "in_progress");
  await expect(row).toContainText("At the provider");
  // The provider answers one request a poll: the panel's count follows it up.
  await expect.poll(async () => (await sentAndAnswered(row)).answered, { timeout: 30_000 }).toBeGreaterThan(0);
  const first = await sentAndAnswered(row);
  expect(first.sent).toBe(ITEMS.length);
  expect(first.answered).toBeLessThan(ITEMS.length);
  await expect.poll(async () => (await sentAndAnswered(row)).answered, { timeout: 30_000 }).toBeGreaterThan(first.answered);
  // Items at the provider are running, none finished yet: results settle when the provider batch ends.
  await expect(detail).toHaveAttribute("data-status", "running");
  await expect(detail.getByTestId("count-succeeded")).toHaveText("0");
  await expectFits(panelOf(page), DESKTOP.width);
  await laneOf(page).scrollIntoViewIfNeeded();
  await shot(page, "01-desktop-at-provider");
});

test("390×844: the drawer shows the lane at the provider, then Done with every request answered", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  await expect(detailOf(page)).toHaveAttribute("data-batch-id", batchId);
  const row = laneOf(page).getByTestId("provider-batch");
  await expect(row).toHaveAttribute("data-state", "in_progress");
  await expectFits(panelOf(page), PHONE.width);
  await laneOf(page).scrollIntoViewIfNeeded();
  await shot(page, "02-phone-at-provider");

  batches.finishNow();
  await expect(row).toHaveAttribute("data-state", "settled", { timeout: 30_000 });
  await expect(row).toContainText("Done");
  expect(await sentAndAnswered(row)).toEqual({ sent: ITEMS.length, answered: ITEMS.length });
  await expect(detailOf(page)).toHaveAttribute("data-status", "completed");
  await expect(detailOf(page).getByTestId("count-succeeded")).toHaveText(String(ITEMS.length));
  await expectFits(panelOf(page), PHONE.width);
  await laneOf(page).scrollIntoViewIfNeeded();
  await shot(page, "03-phone-done");
});

test("1400×900: the finished batch keeps its lane and its provider batch, Done", async () => {
  await page.setViewportSize(DESKTOP);
  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed");
  await expect(detail.getByTestId("batch-lane-badge")).toHaveText("lane provider batch");
  const row = laneOf(page).getByTestId("provider-batch");
  await expect(row).toHaveAttribute("data-state", "settled");
  expect(await sentAndAnswered(row)).toEqual({ sent: ITEMS.length, answered: ITEMS.length });
  // The fake saw one provider batch of every item, and no live call.
  expect(batches.batches.size).toBe(1);
  expect([...batches.batches.values()][0]!.requests).toHaveLength(ITEMS.length);
  expect(fake.requests.filter((r) => r.path === "/v1/messages")).toHaveLength(0);
  await expectFits(panelOf(page), DESKTOP.width);
  await laneOf(page).scrollIntoViewIfNeeded();
  await shot(page, "04-desktop-done");
});
