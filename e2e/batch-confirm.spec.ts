import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import { type BatchProjection, batchListSchema } from "@/lib/api/batches";
import { projectFromPilot, projectionSentence } from "@/lib/pilot-projection";
import { type FakeOpenAI, startFakeOpenAI } from "../test/helpers/fake-openai";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { PRICED_MODEL_KEY_ENV, PRICED_SUBAGENT, pricedModelEntry } from "./support/priced-model";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * No surprise bills from the chat, in real Chromium against the production build: a person asks
 * the (simulated) lead for a batch on the `appraiser` sub-agent, whose model is priced
 * (e2e/support/priced-model.ts), so the estimate is over subagent_batches.confirm_over_usd and
 * the call waits on a card with the items, tokens and cost (live and on the provider's batch
 * lane) and Run, "Run a pilot of 10" and Cancel. Run: the batch runs in a real worker process
 * (its items on a local fake OpenAI endpoint). Pilot: it pauses after 10 items, the panel says
 * why and the lead is woken once with how the pilot went. Cancel: nothing is created and the lead
 * says so. Screenshots of the card at 1400×900 and 390×844.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const ITEMS = Array.from({ length: 12 }, (_, i) => `ticket ${i + 1}`);
/** What the person types: the simulated lead calls batch_task with these arguments. */
const ASK = `Appraise these tickets [[tool:batch_task ${JSON.stringify({ subagent: PRICED_SUBAGENT, prompt_template: "Appraise {{item}}: how urgent is it?", items: ITEMS })}]]`;

let page: Page;
let fake: FakeOpenAI;

test.beforeAll(async ({ browser }) => {
  fake = await startFakeOpenAI();
  await startWorker({ env: { FLOTILLA__MODELS: JSON.stringify([pricedModelEntry(fake.url)]), [PRICED_MODEL_KEY_ENV]: "e2e-fake-key" } });
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "batch-confirm");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
  await fake?.close();
});

const button = (scope: Locator, name: string) => scope.getByRole("button", { name, exact: true });
const detailOf = (p: Page) => p.getByRole("complementary", { name: "Batches" }).getByTestId("batch-detail");
/** The lead's reply that says `text`. */
const leadReply = (p: Page, text: string | RegExp) => p.locator('article[data-role="assistant"]').filter({ hasText: text });

async function batchesOf(thread: string): Promise<BatchProjection[]> {
  const res = await page.request.get(`/api/threads/${thread}/subagent-batches`);
  expect(res.status()).toBe(200);
  return batchListSchema.parse(await res.json()).batches;
}

/** A new thread where the person has asked for the batch: its card, waiting with the estimate. */
async function askedCard(title: string): Promise<{ thread: string; card: Locator }> {
  const thread = await createThreadViaApi(page, title);
  await page.goto(`/threads/${thread}`);
  await page.getByRole("textbox", { name: "Message" }).fill(ASK);
  await page.keyboard.press("Enter");
  const card = page.locator('[data-tool="batch_task"]').getByTestId("approval-card");
  await expect(card).toBeVisible({ timeout: 30_000 });
  const estimate = card.getByTestId("approval-estimate");
  // The summary first: what would run, on what, how many, for how much, on which lane.
  await expect(estimate).toContainText(/^Sub-agent\s*appraiser\s*Model\s*e2e-priced\s*Template\s*Appraise \{\{item\}\}: how urgent is it\?\s*Items\s*12\s*Runs on\s*Live/);
  await expect(estimate).toContainText("Output500 an item: assumed; an output schema gives a closer figure");
  // The raw arguments (every item) only under Details, after the summary.
  const args = card.getByTestId("approval-arguments");
  await expect(args).toBeHidden();
  await card.getByText("Details: the call's arguments").click();
  await expect(args).toBeVisible();
  await expect(args).toContainText('"ticket 12"');
  expect((await estimate.boundingBox())!.y).toBeLessThan((await args.boundingBox())!.y);
  await card.getByText("Details: the call's arguments").click();
  await expect(args).toBeHidden();
  await expect(estimate).toContainText(/Items\s*12/);
  await expect(estimate).toContainText(/Tokens\s*[\d.]+k? in, 6\.0k out/);
  // 12 items × 500 output tokens at $600 a million is $3.60 before the input; the lane is half.
  await expect(estimate).toContainText(/Live\s*\$3\.\d/);
  await expect(estimate).toContainText(/Batch lane\s*\$1\.\d/);
  for (const name of ["Run", "Run a pilot of 10", "Cancel"]) await expect(button(card, name)).toBeEnabled();
  expect(await batchesOf(thread)).toEqual([]);
  return { thread, card };
}

/** The card at both sizes; on the phone its estimate and its three buttons are on screen. */
async function shots(card: Locator, name: string) {
  await card.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `batch-confirm-${name}-desktop.png`) });
  await page.setViewportSize(PHONE);
  await card.scrollIntoViewIfNeeded();
  for (const target of [card.getByTestId("approval-estimate"), ...["Run", "Run a pilot of 10", "Cancel"].map((n) => button(card, n))]) {
    const box = await target.boundingBox();
    expect(box!.x).toBeGreaterThanOrEqual(0);
    expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
  }
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `batch-confirm-${name}-phone.png`) });
  await page.setViewportSize(DESKTOP);
}

test("Cancel: nothing is created and the lead says so", async () => {
  const { thread, card } = await askedCard("Confirm cancel");
  await shots(card, "card");
  await button(card, "Cancel").click();
  await expect(page.locator('[data-tool="batch_task"]')).toHaveAttribute("data-state", "output-denied", { timeout: 30_000 });
  // The lead's reply quotes the tool result: the call was denied, nothing submitted.
  await expect(leadReply(page, "batch_task: error: denied by the user: cancelled after seeing the estimate; nothing was submitted")).toHaveCount(1, { timeout: 30_000 });
  await page.reload();
  await expect(page.locator('[data-tool="batch_task"]')).toHaveAttribute("data-state", "output-denied");
  expect(await batchesOf(thread)).toEqual([]);
});

test("Run: the batch is created and every item runs in the worker", async () => {
  const { thread, card } = await askedCard("Confirm run");
  await button(card, "Run").click();
  const receipt = page.getByTestId("batch-receipt");
  await expect(receipt).toContainText("Batch submitted", { timeout: 30_000 });
  await expect(receipt).toContainText("12 items");
  await expect(leadReply(page, "The person saw the estimate and chose Run")).toHaveCount(1);
  await receipt.getByRole("link", { name: "View in batch panel" }).click();
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  const [batch, ...others] = await batchesOf(thread);
  expect(others).toEqual([]);
  expect(batch).toMatchObject({ total: 12, pilot: null, counts: { succeeded: 12 } });
  // The items ran on the priced model's endpoint (the worker's only entry of that name).
  expect(fake.requests.length).toBeGreaterThanOrEqual(12);
});

test('"Run a pilot of 10": the first 10 items run, then the batch pauses and the panel says why', async () => {
  test.setTimeout(240_000);
  const { thread, card } = await askedCard("Confirm pilot");
  await button(card, "Run a pilot of 10").click();
  // The buttons leave at once: "Running a pilot of 10 items first." shows until the tool's answer
  // replaces the card, which on a fast turn comes before a poll would see the note.
  await expect(button(card, "Run a pilot of 10")).toHaveCount(0);
  const receipt = page.getByTestId("batch-receipt");
  await expect(receipt).toContainText("Batch submitted", { timeout: 30_000 });
  await expect(leadReply(page, /chose \\?"Run a pilot of 10\\?"/)).toHaveCount(1);
  await receipt.getByRole("link", { name: "View in batch panel" }).click();
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "paused", { timeout: 90_000 });
  const [batch] = await batchesOf(thread);
  expect(batch).toMatchObject({ total: 12, pilot: 10, pause_reason: "pilot", counts: { succeeded: 10 } });
  // The header's badge names the lead's model (the simulator); the batch says its own, a real one.
  await expect(page.getByTestId("simulator-badge")).toHaveText(/^Lead: Simulator/);
  await expect(detail.getByTestId("batch-model")).toHaveText("model e2e-priced");
  await page.getByTestId("simulator-badge").click();
  await expect(page.getByRole("note")).toContainText("The lead agent answers with the built-in simulator");
  await expect(page.getByRole("note")).toContainText("batches run on the model their sub-agent names");
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "batch-confirm-lead-model-desktop.png") });
  await page.getByTestId("simulator-badge").click();
  // The rest projected from what the pilot really used on the priced model, in the panel and on the receipt.
  const projection = projectFromPilot({ total: 12, succeeded: 10, failed: 0, costUsd: batch!.cost_usd });
  expect(projection!.totalUsd).toBeGreaterThan(0);
  const projected = projectionSentence(12, projection!);
  await expect(detail.getByTestId("batch-waiting")).toHaveText(
    `Paused after its pilot: the first 10 items ran — check their results. ${projected} Resume runs the other 2 items.`,
  );
  await expect(receipt).toContainText(projected);
  // The lead is woken once with how the pilot went, in the open tab.
  const report = leadReply(page, `Batch ${batch!.id.slice(0, 8)} paused after its pilot`);
  await expect(report).toHaveCount(1, { timeout: 60_000 });
  await expect(report).toContainText("10 of its first 10 items succeeded.");
  await expect(report).toContainText(projected);
  await expect(report).toContainText("resume the batch there to run the other 2 items.");
  await detail.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "batch-confirm-pilot-paused-desktop.png") });
  // On a phone: the panel in its drawer ("View in batch panel" opened it), then the receipt and the lead's words in the chat.
  await page.setViewportSize(PHONE);
  await expect(page.getByTestId("simulator-badge")).toBeInViewport();
  const toggle = page.getByTestId("batches-drawer-toggle");
  if ((await toggle.getAttribute("aria-expanded")) !== "true") await toggle.click();
  await detail.getByTestId("batch-waiting").scrollIntoViewIfNeeded();
  await expect(detail.getByTestId("batch-waiting")).toBeInViewport();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "batch-confirm-pilot-paused-phone-panel.png") });
  await page.keyboard.press("Escape");
  await expect(toggle).toHaveAttribute("aria-expanded", "false");
  await report.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "batch-confirm-pilot-paused-phone-chat.png") });
  await page.setViewportSize(DESKTOP);
  // Resume runs the other two.
  await button(detail, "Resume").click();
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
  expect((await batchesOf(thread))[0]).toMatchObject({ counts: { succeeded: 12 } });
});
