import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import type { GoldenItem, GoldenItemPage, GoldenSetDetail } from "@/lib/api/golden-sets";
import type { ReviewPage } from "@/lib/api/review-queue";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Golden sets in the browser (DESIGN "Reviews that teach"), in real Chromium against the
 * production build, a real worker and the simulator: six answers of a typed batch are decided in
 * /review (three accepted, two corrected, one rejected without a correction), "Save reviewed as
 * golden set…" makes a set of five from them, its page shows the version and the items (the
 * corrections as the expected answers) and downloads items.jsonl; the batch menu's "Save reviewed
 * as golden set…" adds the batch again as version 2; the New batch dialog starts a batch whose
 * items are the set's and whose prompts carry two of its answers as examples (the estimate asked
 * with them); and the set is deleted.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `golden-${name}.png`), fullPage: false });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

const SCHEMA = { type: "object", properties: { label: { type: "string", enum: ["positive", "negative"] } }, required: ["label"] };
/** What the person does with each item in /review: accept, correct to a label, or reject. */
const ITEMS: { item_key: string; text: string; decide: "accept" | "reject" | { correct: string } }[] = [
  { item_key: "g1-loved", text: "Loved it, would buy again", decide: "accept" },
  { item_key: "g2-great", text: "Great value", decide: "accept" },
  { item_key: "g3-fine", text: "Does the job", decide: "accept" },
  { item_key: "g4-meh", text: "Broke in a week", decide: { correct: "negative" } },
  { item_key: "g5-sarcasm", text: "Oh great, another crash", decide: { correct: "negative" } },
  { item_key: "g6-spam", text: "Buy followers now", decide: "reject" },
];
const SET_NAME = "Review labels, checked by people";

let page: Page;
let thread: string;
let batchId: string;
let setId: string;

const queueKey = () => page.getByTestId("review-item-key");
const decision = () => page.getByRole("region", { name: "Decision" });
const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });

async function pendingReviews(): Promise<ReviewPage> {
  const res = await page.request.get(`/api/reviews?batch_id=${batchId}`);
  expect(res.status()).toBe(200);
  return (await res.json()) as ReviewPage;
}

async function apiItems(version: number): Promise<GoldenItem[]> {
  const res = await page.request.get(`/api/golden-sets/${setId}/items?version=${version}&limit=200`);
  expect(res.status()).toBe(200);
  return ((await res.json()) as GoldenItemPage).items;
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "golden");
  thread = await createThreadViaApi(page, "Golden labels");
  const res = await page.request.post(`/api/threads/${thread}/subagent-batches`, {
    data: {
      submission_key: `golden-${Date.now()}`,
      prompt_template: "Label this review: {{text}}",
      items: ITEMS.map(({ item_key, text }) => ({ item_key, text })),
      output_schema: SCHEMA,
      review: { when: "all" },
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
  await expect.poll(async () => (await pendingReviews()).items.length, { timeout: 90_000 }).toBe(ITEMS.length);
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900 and 390×844: decisions in /review saved as a golden set: five items, the corrections as expected", async () => {
  await page.goto("/review");
  await expect(page.getByTestId("review-position")).toContainText(`${ITEMS.length} waiting for review`);
  for (let i = 0; i < ITEMS.length; i++) {
    const key = (await queueKey().textContent())!;
    const item = ITEMS.find((it) => it.item_key === key)!;
    if (item.decide === "accept") await page.keyboard.press("a");
    else if (item.decide === "reject") await page.keyboard.press("r");
    else {
      await page.keyboard.press("e");
      await decision().getByLabel("Corrected output").fill(JSON.stringify({ label: item.decide.correct }));
      await page.keyboard.press("Control+Enter");
    }
    await expect(page.getByTestId("review-notice")).toContainText(key);
  }
  await expect(page.getByTestId("review-empty")).toBeVisible();

  await page.getByRole("button", { name: "Save reviewed as golden set…" }).click();
  const dialog = page.getByRole("dialog", { name: "Save reviewed as golden set" });
  await expect(dialog).toBeVisible();
  // The one batch decided: named, no choice to make.
  await expect(dialog).toContainText(`From batch ${batchId.slice(0, 8)}`);
  await expect(dialog.getByRole("radio", { name: "Add to an existing set (a new version)" })).toBeDisabled();
  // A letter typed into the dialog is the name's, not the queue's Accept key.
  await dialog.getByLabel("Name of the new set").fill(SET_NAME);
  await expect(dialog.getByRole("button", { name: "Save golden set" })).toBeEnabled();
  await dialog.getByRole("checkbox", { name: /Accepted answers/ }).uncheck();
  await dialog.getByRole("checkbox", { name: /Corrected answers/ }).uncheck();
  await expect(dialog.getByRole("button", { name: "Save golden set" })).toBeDisabled();
  await expect(dialog).toContainText("Include accepted or corrected answers (or both).");
  await dialog.getByRole("checkbox", { name: /Accepted answers/ }).check();
  await dialog.getByRole("checkbox", { name: /Corrected answers/ }).check();
  await shot(page, "01-save-dialog-desktop");
  await dialog.getByRole("button", { name: "Save golden set" }).click();
  await expect(dialog.getByTestId("golden-saved")).toContainText(`Saved ${SET_NAME} version 1: 5 items (5 added, 0 replaced).`);
  await shot(page, "02-saved-desktop");

  const sets = await page.request.get("/api/golden-sets");
  const list = ((await sets.json()) as { golden_sets: { id: string; name: string; version: number; items: number }[] }).golden_sets;
  expect(list).toHaveLength(1);
  expect(list[0]).toMatchObject({ name: SET_NAME, version: 1, items: 5 });
  setId = list[0]!.id;
  const items = await apiItems(1);
  expect(items.map((i) => [i.item_key, i.expected, i.source?.decision])).toEqual([
    ["g1-loved", { label: "positive" }, "accepted"],
    ["g2-great", { label: "positive" }, "accepted"],
    ["g3-fine", { label: "positive" }, "accepted"],
    ["g4-meh", { label: "negative" }, "corrected"],
    ["g5-sarcasm", { label: "negative" }, "corrected"],
  ]);

  await page.setViewportSize(PHONE);
  const box = await dialog.boundingBox();
  expect(box!.x).toBeGreaterThanOrEqual(0);
  expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
  await expectFits(dialog, PHONE.width);
  await shot(page, "03-saved-phone");
  await page.setViewportSize(DESKTOP);
  await dialog.getByRole("link", { name: "Open the golden set" }).click();
  await expect(page).toHaveURL(new RegExp(`/golden-sets/${setId}$`));
});

test("1400×900 and 390×844: the set's page shows its version and items, and downloads items.jsonl", async () => {
  await expect(page.getByTestId("golden-set-name")).toHaveText(SET_NAME);
  const versions = page.getByTestId("golden-version");
  await expect(versions).toHaveCount(1);
  await expect(versions.first()).toContainText("v1");
  await expect(versions.first()).toContainText(`reviewed batch ${batchId.slice(0, 8)}`);
  const rows = page.getByTestId("golden-item");
  await expect(rows).toHaveCount(5);
  await expect(page.getByTestId("golden-items-count")).toHaveText("5 of 5 shown");
  const meh = page.locator('[data-testid="golden-item"][data-item-key="g4-meh"]');
  await expect(meh.getByTestId("golden-item-expected")).toContainText('"label": "negative"');
  await expect(meh.getByTestId("golden-item-source")).toContainText(`corrected by a person in ${batchId.slice(0, 8)}`);
  await expect(page.locator('[data-item-key="g1-loved"]').getByTestId("golden-item-source")).toContainText("accepted in");
  await expect(page.locator('[data-item-key="g6-spam"]')).toHaveCount(0);
  await shot(page, "04-set-desktop");

  const [download] = await Promise.all([page.waitForEvent("download"), page.getByRole("link", { name: "items.jsonl" }).click()]);
  const lines = readFileSync((await download.path())!, "utf8").trimEnd().split("\n").map((l) => JSON.parse(l) as GoldenItem);
  expect(lines).toEqual(await apiItems(1));

  // The navigation's Golden sets lists it.
  await page.getByRole("complementary", { name: "Threads" }).getByRole("link", { name: "Golden sets" }).click();
  await expect(page).toHaveURL(/\/golden-sets$/);
  await expect(page.getByTestId("golden-set-link")).toHaveCount(1);
  await expect(page.getByTestId("golden-set-link")).toContainText(`${SET_NAME}version 1 · 5 items`);
  await shot(page, "05-list-desktop");

  await page.setViewportSize(PHONE);
  await page.goto(`/golden-sets/${setId}`);
  await expect(rows).toHaveCount(5);
  await expectFits(page.getByTestId("golden-items"), PHONE.width);
  await expectFits(page.getByTestId("golden-versions"), PHONE.width);
  await shot(page, "06-set-phone");
  await page.goto("/golden-sets");
  await expect(page.getByTestId("golden-set-link")).toHaveCount(1);
  await shot(page, "07-list-phone");
  await page.setViewportSize(DESKTOP);
});

test("1400×900: the batch menu's Save reviewed as golden set… adds the batch again as version 2", async () => {
  await page.goto(`/threads/${thread}`);
  const detail = panelOf(page).getByTestId("batch-detail");
  await expect(detail).toHaveAttribute("data-batch-id", batchId);
  await detail.getByRole("button", { name: "Save reviewed as golden set…" }).click();
  const dialog = page.getByRole("dialog", { name: "Save reviewed as golden set" });
  await dialog.getByRole("radio", { name: "Add to an existing set (a new version)" }).check();
  await expect(dialog.getByLabel("Golden set to add to")).toHaveValue(setId);
  // Only the corrections this time: they answer their keys anew.
  await dialog.getByRole("checkbox", { name: /Accepted answers/ }).uncheck();
  await shot(page, "08-add-dialog-desktop");
  await dialog.getByRole("button", { name: "Save golden set" }).click();
  await expect(dialog.getByTestId("golden-saved")).toContainText(`Saved ${SET_NAME} version 2: 5 items (0 added, 2 replaced).`);
  await dialog.getByRole("link", { name: "Open the golden set" }).click();
  await expect(page).toHaveURL(new RegExp(`/golden-sets/${setId}$`));
  await expect(page.getByTestId("golden-version")).toHaveCount(2);
  await expect(page.getByTestId("golden-items")).toHaveAttribute("data-version", "2");
  // The first version reads as it was.
  await page.getByTestId("golden-version").filter({ hasText: "v1" }).getByRole("button").click();
  await expect(page.getByTestId("golden-items")).toHaveAttribute("data-version", "1");
  await expect(page.getByTestId("golden-items")).toHaveAttribute("data-ready", "true");
  await expect(page.getByTestId("golden-item")).toHaveCount(5);
  const detailRes = await page.request.get(`/api/golden-sets/${setId}`);
  expect(((await detailRes.json()) as GoldenSetDetail).versions.map((v) => v.items)).toEqual([5, 5]);
});

test("1400×900 and 390×844: New batch from the golden set as items, with two of its answers as examples, the estimate counting them", async () => {
  await page.goto(`/threads/${thread}`);
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByText("Golden set", { exact: true }).click();
  const source = dialog.getByTestId("golden-items-source");
  await expect(source.getByLabel("Golden set", { exact: true })).toHaveValue(setId);
  await expect(source.getByLabel("Version")).toHaveValue("");
  // The set's items' fields, for the template.
  await expect(source).toContainText(`5 items of ${SET_NAME} with the fields {{text}}`);
  await source.getByLabel("Version").selectOption("1");
  await dialog.getByLabel("Prompt template").fill("Label this review: {{text}}");
  await dialog.getByText("Output and checks").click();
  await dialog.getByLabel("Output schema").fill(JSON.stringify(SCHEMA));
  const estimate = dialog.getByTestId("new-batch-estimate");
  await expect(estimate.getByTestId("estimate-items")).toHaveText("5");
  /** The estimate's input tokens ("≈1,234 …"). */
  const inputTokens = async () => Number((await estimate.getByTestId("estimate-input").textContent())!.match(/\d[\d,]*/)![0].replace(/,/g, ""));
  await expect(estimate.getByTestId("estimate-input")).toHaveText(/^≈\d/);
  const without = await inputTokens();

  // Examples: the estimate is asked again with them, and counts their tokens.
  const examples = dialog.getByTestId("examples-field");
  await examples.getByLabel("Show the model examples from a golden set").check();
  await expect(examples.getByLabel("Examples from", { exact: true })).toHaveValue(setId);
  await examples.getByLabel("Number of examples").fill("9");
  await expect(examples.getByRole("alert")).toContainText(`Examples: ${SET_NAME} holds 5 items, fewer than 9.`);
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeDisabled();
  const asked = page.waitForRequest((r) => r.url().endsWith("/subagent-batches/estimate") && (r.postDataJSON() as { examples?: unknown }).examples !== undefined);
  await examples.getByLabel("Number of examples").fill("2");
  const body = (await asked).postDataJSON() as Record<string, unknown>;
  expect(body).toMatchObject({ golden_set: { id: setId, version: 1 }, examples: { golden_set: setId, count: 2 }, prompt_template: "Label this review: {{text}}" });
  expect(body).not.toHaveProperty("items");
  await expect.poll(inputTokens).toBeGreaterThan(without);
  await shot(page, "09-new-batch-golden-desktop");
  await page.setViewportSize(PHONE);
  const box = await dialog.boundingBox();
  expect(box!.x).toBeGreaterThanOrEqual(0);
  expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
  await expectFits(source, PHONE.width);
  await expectFits(examples, PHONE.width);
  await examples.scrollIntoViewIfNeeded();
  await shot(page, "10-new-batch-golden-phone");
  await page.setViewportSize(DESKTOP);

  await dialog.getByRole("button", { name: "Start batch" }).click();
  await expect(dialog).toBeHidden();
  const detail = panelOf(page).getByTestId("batch-detail");
  const created = (await detail.getAttribute("data-batch-id"))!;
  expect(created).not.toBe(batchId);
  const batchUrl = `/api/threads/${thread}/subagent-batches/${created}`;
  const read = async () => (await (await page.request.get(batchUrl)).json()) as {
    status: string;
    total: number;
    counts: { succeeded: number };
    verdicts: { passed: number; failed: number };
    golden_set: { id: string; version: number } | null;
    checks: { name: string; passed: number; failed: number }[];
  };
  await expect.poll(async () => (await read()).status, { timeout: 90_000 }).toBe("completed");
  const done = await read();
  expect(done.total).toBe(5);
  expect(done.golden_set).toEqual({ id: setId, version: 1 });
  // Every answer graded against what people said (the golden check), beside the verdict.
  expect(done.counts.succeeded).toBe(5);
  const golden = done.checks.find((c) => c.name === "golden")!;
  expect(golden.passed + golden.failed).toBe(5);
  expect(done.verdicts).toEqual({ passed: golden.passed, failed: golden.failed });
  // The batch kept its examples, their version pinned (the newest, 2): what "Run a variant…" starts from.
  const draft = (await (await page.request.get(`${batchUrl}/variant`)).json()) as { examples?: unknown };
  expect(draft.examples).toEqual({ golden_set: setId, version: 2, count: 2 });
});

test("1400×900: Delete set… asks, then removes the set and goes back to the list", async () => {
  await page.goto(`/golden-sets/${setId}`);
  await page.getByRole("button", { name: "Delete set…" }).click();
  const question = page.getByRole("alertdialog", { name: "Delete this golden set?" });
  await expect(question).toContainText("all 2 versions and their items go");
  await question.getByRole("button", { name: "Delete set" }).click();
  await expect(page).toHaveURL(/\/golden-sets$/);
  await expect(page.getByTestId("golden-sets-empty")).toBeVisible();
  expect((await page.request.get(`/api/golden-sets/${setId}`)).status()).toBe(404);
});
