import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { E2E_FAKE_ANTHROPIC_PORT, E2E_FAKE_MODELS } from "../playwright.config";
import { type FakeAnthropic, startFakeAnthropic } from "../test/helpers/fake-anthropic";
import { addAnthropicBatches } from "../test/helpers/fake-provider-batches";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The New batch dialog's Model and the built-in "data" sub-agent, in real Chromium against the
 * production build: a new batch runs on the model picked (by default the sub-agent's own), and
 * the providers' batch lane is offered only where it is taken: a sub-agent without tools (the
 * built-in data) on an OpenAI or Anthropic model (the e2e server's "claude-fake"); elsewhere a
 * line says what would offer it. A worker runs (the panel offers New batch only then), with the
 * fake Anthropic batches API holding the batch open at the provider.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };
const CLAUDE = E2E_FAKE_MODELS[0]!.name;
const ITEMS = ["The invoice is wrong", "Cannot log in", "Great support, thanks"];

let page: Page;
let thread: string;
let fake: FakeAnthropic;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const shot = (p: Page, name: string) => p.screenshot({ path: path.join(SCREENSHOT_DIR, `new-batch-model-${name}.png`) });

async function openDialog() {
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Label this ticket: {{item}}");
  await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.join("\n"));
  return dialog;
}

test.beforeAll(async ({ browser }) => {
  fake = await startFakeAnthropic({ port: E2E_FAKE_ANTHROPIC_PORT, handler: () => ({ type: "text", text: "billing", chunkDelayMs: 0 }) });
  addAnthropicBatches(fake, { hold: true, perPoll: 1 });
  await startWorker({ env: { FLOTILLA__MODELS: JSON.stringify(E2E_FAKE_MODELS), E2E_FAKE_ANTHROPIC_KEY: "e2e-fake-key" } });
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "model");
  thread = await createThreadViaApi(page, "Data batch");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
  await fake?.close();
});

test("1400×900: Model picks a new batch's model; the lane shows only for a sub-agent without tools on an anthropic model", async () => {
  await page.goto(`/threads/${thread}`);
  const dialog = await openDialog();
  const model = dialog.getByLabel("Model", { exact: true });
  const subagent = dialog.getByLabel("Sub-agent");
  const lane = dialog.getByRole("group", { name: "Lane" });
  const hint = dialog.getByTestId("lane-hint");
  // general on its own model (the simulator): no lane, and a line says what would offer it.
  await expect(subagent).toHaveValue("general");
  await expect(model).toHaveValue("");
  await expect(model.locator("option").first()).toHaveText("simulator (the sub-agent's)");
  await expect(lane).toHaveCount(0);
  await expect(hint).toContainText("The providers' batch lane (50% off) needs a sub-agent without tools (data");
  // general has tools: an anthropic model does not make it take the lane.
  await model.selectOption(CLAUDE);
  await expect(lane).toHaveCount(0);
  // The built-in data has none: on claude-fake it does.
  await subagent.selectOption("data");
  await expect(dialog.getByText("The one built-in the providers' batch lane takes.")).toBeVisible();
  await expect(lane).toBeVisible();
  await expect(hint).toHaveCount(0);
  // On its own model (the simulator) it does not.
  await model.selectOption("");
  await expect(lane).toHaveCount(0);
  await model.selectOption(CLAUDE);
  await model.scrollIntoViewIfNeeded();
  await shot(page, "01a-desktop-model");
  await lane.getByRole("radio", { name: /^Provider batch/ }).check();
  await expect(dialog.getByTestId("estimate-provider-batch")).toBeVisible();
  await lane.scrollIntoViewIfNeeded();
  await shot(page, "01-desktop");

  const created = page.waitForResponse((r) => r.request().method() === "POST" && /\/subagent-batches$/.test(new URL(r.url()).pathname));
  await dialog.getByRole("button", { name: "Start batch" }).click();
  const res = await created;
  expect(res.status()).toBe(201);
  expect(res.request().postDataJSON()).toMatchObject({ subagent: "data", model: CLAUDE, lane: "provider_batch" });
  expect(await res.json()).toMatchObject({ subagent: "data", model: CLAUDE, lane: "provider_batch" });
  await expect(dialog).toHaveCount(0);
  await expect(panelOf(page).getByTestId("batch-detail").getByTestId("batch-lane-badge")).toHaveText("lane provider batch");
});

test("390×844: the dialog's Model and Lane fit the phone", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  const dialog = await openDialog();
  await dialog.getByLabel("Sub-agent").selectOption("data");
  await dialog.getByLabel("Model", { exact: true }).selectOption(CLAUDE);
  const lane = dialog.getByRole("group", { name: "Lane" });
  await expect(lane).toBeVisible();
  await expectFits(dialog, PHONE.width);
  await dialog.getByLabel("Model", { exact: true }).scrollIntoViewIfNeeded();
  await shot(page, "02-phone");
  await lane.scrollIntoViewIfNeeded();
  await shot(page, "03-phone-lane");
});
