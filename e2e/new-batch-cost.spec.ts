import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The New batch dialog before Start, in real Chromium against the production build, a real
 * worker and the simulator: an output schema that does not compile and a regex check RE2 does
 * not compile are named inline and hold Start back; fixed, the estimate shows; a judge naming
 * an unknown model gets the estimate's 400 inline; a pilot of 3 runs 3 items and pauses the
 * batch with pause_reason "pilot". On a desktop and a phone, with screenshots of the dialog
 * showing the estimate and the pilot.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
test.describe.configure({ mode: "serial" });

const SIZES = [
  { name: "desktop", viewport: { width: 1400, height: 900 } },
  { name: "phone", viewport: { width: 390, height: 844 } },
] as const;

const ITEMS = Array.from({ length: 12 }, (_, i) => `ticket ${i + 1}: the printer on floor ${i + 1} is jammed`);
const SCHEMA = { type: "object", properties: { label: { type: "string", enum: ["hardware", "software"] } }, required: ["label"] };
const CHECKS = [{ name: "label_word", type: "regex", pattern: "^(hardware|software)$", path: "/label" }];

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });

interface BatchState {
  status: string;
  pause_reason: string | null;
  counts: Record<string, number>;
}

async function batchState(p: Page, threadId: string, id: string): Promise<BatchState> {
  const res = await p.request.get(`/api/threads/${threadId}/subagent-batches/${id}`);
  expect(res.status()).toBe(200);
  return (await res.json()) as BatchState;
}

/** The dialog fits its viewport: nothing sticks out sideways, and its right edge is on screen. */
async function expectFits(p: Page, viewport: { width: number }) {
  const dialog = p.getByRole("dialog", { name: "New batch" });
  const box = await dialog.boundingBox();
  expect(box).not.toBeNull();
  expect(box!.x).toBeGreaterThanOrEqual(0);
  expect(box!.x + box!.width).toBeLessThanOrEqual(viewport.width);
  const overflow = await dialog.evaluate((el) => el.scrollWidth - el.clientWidth);
  expect(overflow).toBeLessThanOrEqual(0);
}

test.beforeAll(async () => {
  await startWorker();
});

test.afterAll(async () => {
  await stopAllWorkers();
});

for (const size of SIZES) {
  test(`${size.viewport.width}×${size.viewport.height}: checked before Start, estimated, then a pilot that pauses`, async ({ browser }) => {
    const page = await browser.newPage({ viewport: size.viewport });
    await signedInAccount(page, `cost-${size.name}`);
    const thread = await createThreadViaApi(page, `Cost ${size.name}`);
    await page.goto(`/threads/${thread}`);
    if (size.name === "phone") await page.getByTestId("batches-drawer-toggle").click();
    await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
    const dialog = page.getByRole("dialog", { name: "New batch" });
    const start = dialog.getByRole("button", { name: "Start batch" });
    await dialog.getByLabel("Prompt template").fill("Label this ticket: {{item}}");
    await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.join("\n"));
    await expect(dialog.getByTestId("new-batch-count")).toContainText("12 items");

    // An output schema Ajv refuses and a pattern RE2 refuses (lookahead: JavaScript would take it).
    await dialog.getByText("Output and checks").click();
    await dialog.getByLabel("Output schema").fill('{"type": "nope"}');
    await expect(dialog.getByRole("alert")).toHaveText("Output schema type: must be equal to one of the allowed values");
    await expect(start).toBeDisabled();
    await dialog.getByLabel("Output schema").fill(JSON.stringify(SCHEMA));
    await dialog.getByLabel("Checks").fill(JSON.stringify([...CHECKS, { name: "no_a", type: "regex", pattern: "(?=a)b" }]));
    await expect(dialog.getByRole("alert")).toContainText("Check 2 pattern: does not compile (RE2 syntax)");
    await expect(start).toBeDisabled();
    // Both fields are named, each under its own field, at once.
    await dialog.getByLabel("Output schema").fill('{"type": "object", "properties": {"label": {"type": "string", "pattern": "x{101}"}}}');
    await expect(dialog.getByRole("alert")).toHaveCount(2);
    await expect(dialog.getByRole("alert").first()).toHaveText(
      "Output schema properties.label.pattern: counted repetition {101} is above the limit of 100",
    );
    await dialog.getByLabel("Output schema").fill(JSON.stringify(SCHEMA));

    // A judge naming a model outside the catalog passes the dialog's checks; the estimate's 400 names it.
    await dialog.getByLabel("Checks").fill(JSON.stringify([...CHECKS, { name: "fair", type: "judge", rubric: "Is it fair?", model: "nope" }]));
    const estimate = dialog.getByTestId("new-batch-estimate");
    await expect(estimate.getByRole("alert")).toContainText('Check 2 model: unknown model "nope"');
    await expect(start).toBeDisabled();

    await dialog.getByLabel("Checks").fill(JSON.stringify(CHECKS));
    await expect(dialog.getByRole("alert")).toHaveCount(0);
    await expect(start).toBeEnabled();

    // The estimate, before anything is submitted: the simulator's tokens are approximated and free.
    await expect(estimate.getByTestId("estimate-items")).toHaveText("12");
    await expect(estimate.getByTestId("estimate-input")).toHaveText(/^≈\d/);
    await expect(estimate.getByTestId("estimate-live")).toHaveText("$0.0000");
    // The output it assumes, an item at a time: {"label":"software"} is 21 characters, ~6 tokens, not a flat 500.
    await expect(estimate.getByTestId("estimate-output")).toHaveText("≈72 (6 an item: a typical answer of the output schema)");
    // The simulator has no batch lane: no lane choice.
    await expect(dialog.getByRole("group", { name: "Lane" })).toHaveCount(0);
    // It follows the draft.
    await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.slice(0, 9).join("\n"));
    await expect(estimate.getByTestId("estimate-items")).toHaveText("9");
    await dialog.getByLabel("Items", { exact: true }).fill(ITEMS.join("\n"));
    await expect(estimate.getByTestId("estimate-items")).toHaveText("12");

    // A pilot: 10 by default, 3 here.
    const pilotSize = dialog.getByLabel("Pilot items");
    await expect(pilotSize).toHaveValue("10");
    await expect(pilotSize).toBeDisabled();
    await dialog.getByLabel("Run a pilot first").check();
    await pilotSize.fill("0");
    await expect(dialog.getByRole("alert")).toContainText("Pilot items must be a whole number from 1 to 1000.");
    await expect(start).toBeDisabled();
    await pilotSize.fill("3");
    await expect(dialog.getByRole("alert")).toHaveCount(0);
    await estimate.scrollIntoViewIfNeeded();
    await expectFits(page, size.viewport);
    await page.screenshot({ path: path.join(SCREENSHOT_DIR, `new-batch-cost-${size.name}.png`) });
    await dialog.screenshot({ path: path.join(SCREENSHOT_DIR, `new-batch-cost-${size.name}-dialog.png`) });

    const created = page.waitForResponse(
      (r) => r.request().method() === "POST" && /\/subagent-batches$/.test(new URL(r.url()).pathname),
    );
    await start.click();
    const res = await created;
    expect(res.status()).toBe(201);
    const sent = res.request().postDataJSON() as { pilot?: number; lane?: string };
    expect(sent.pilot).toBe(3);
    const batchId = ((await res.json()) as { id: string }).id;
    await expect(dialog).toHaveCount(0);

    // The first 3 items run, then the batch pauses for the person to look.
    await expect.poll(async () => (await batchState(page, thread, batchId)).status, { timeout: 90_000 }).toBe("paused");
    const paused = await batchState(page, thread, batchId);
    expect(paused.pause_reason).toBe("pilot");
    expect(paused.counts.succeeded).toBe(3);
    await page.close();
  });
}
