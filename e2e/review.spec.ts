import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { resultLineSchema } from "@/lib/api/batches";
import type { ReviewPage } from "@/lib/api/review-queue";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The review queue and "Edit input and retry", in real Chromium against the production build, a
 * real worker and the simulator: a typed batch submitted with review: { when: "failed" } whose
 * checks fail three items (two wrong labels, one judge's 0 with its reason) and whose fourth item
 * fails for good. /review shows them one at a time: a correction the schema refuses (400 inline),
 * an accepted correction (Escape leaves the editor, then a), a rejection with a note, j / k, the a
 * and r keys, Ctrl+Enter accepting from the editor, Accept and Reject on a phone's screen, a decision somebody
 * else made first (409), the empty queue, and an item sent back to the queue that keeps its
 * correction. Then the failed item is retried with an edited input.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `review-${name}.png`), fullPage: false });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

const JUDGE_REASON = "the label ignores the sarcasm";
const ITEMS = [
  { item_key: "fine", text: "Loved it, would buy again", expected: { label: "positive" } },
  { item_key: "wrong-1", text: 'Meh [[json:{"label":"negative"}]]', expected: { label: "positive" } },
  { item_key: "wrong-2", text: 'Not bad at all [[json:{"label":"negative"}]]', expected: { label: "positive" } },
  { item_key: "sarcastic", text: `Oh great, it broke again [[judge-fail:${JUDGE_REASON}]]`, expected: { label: "positive" } },
  { item_key: "broken", text: "Crashes the model [[fail]]", expected: { label: "positive" } },
];

let page: Page;
let thread: string;
let batchId: string;

const queueKey = () => page.getByTestId("review-item-key");
const decision = () => page.getByRole("region", { name: "Decision" });

/** Back to the first loaded item with k, then on with j until the item `key` is on screen. */
async function walkTo(key: string) {
  for (let i = 0; i < 4; i++) await page.keyboard.press("k");
  for (let i = 0; i < 4 && (await queueKey().textContent()) !== key; i++) await page.keyboard.press("j");
  await expect(queueKey()).toHaveText(key);
}

async function pendingReviews(): Promise<ReviewPage> {
  const res = await page.request.get(`/api/reviews?batch_id=${batchId}`);
  expect(res.status()).toBe(200);
  return (await res.json()) as ReviewPage;
}

async function resultLines() {
  const res = await page.request.get(`/api/threads/${thread}/subagent-batches/${batchId}/results.jsonl`);
  expect(res.status()).toBe(200);
  return (await res.text())
    .trimEnd()
    .split("\n")
    .map((l) => resultLineSchema.parse(JSON.parse(l)));
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "review");
  thread = await createThreadViaApi(page, "Reviewed batch");
  const res = await page.request.post(`/api/threads/${thread}/subagent-batches`, {
    data: {
      submission_key: `review-${Date.now()}`,
      prompt_template: "Classify this review: {{text}}",
      items: ITEMS,
      output_schema: { type: "object", properties: { label: { type: "string", enum: ["positive", "negative"] } }, required: ["label"] },
      checks: [
        { name: "label_matches", type: "equals", path: "/label" },
        { name: "sound", type: "judge", rubric: "Is the label a sound reading of the review?" },
      ],
      review: { when: "failed" },
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
  await expect.poll(async () => (await pendingReviews()).items.length, { timeout: 90_000 }).toBe(4);
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900 and 390×844: /review shows one pending item with its input, expected, output and the judge's reason", async () => {
  await page.goto(`/threads/${thread}`);
  const link = page.getByRole("complementary", { name: "Threads" }).locator('a[href="/review"]');
  await expect(link.getByTestId("review-pending-count")).toHaveText(/4/);
  await link.click();
  await expect(page).toHaveURL(/\/review$/);
  await expect(page.getByTestId("review-position")).toHaveText("4 waiting for review · item 1 of 4 loaded");
  // The oldest first: the API's first entry is on screen.
  const first = (await pendingReviews()).items[0]!;
  await expect(queueKey()).toHaveText(first.item_key);
  await expect(page.getByTestId("review-batch-link")).toHaveText("Classify this review: {{text}}");
  await expect(page.getByTestId("review-batch-link")).toHaveAttribute("href", `/threads/${thread}/batches/${batchId}/results`);

  // j / k walk the queue; the judge's reason is shown in full on the item it failed.
  const seen: string[] = [];
  for (let i = 0; i < 4; i++) {
    seen.push((await queueKey().textContent())!);
    await page.keyboard.press("j");
    if (i < 3) await expect(queueKey()).not.toHaveText(seen[i]!);
  }
  // j at the last item stays there; k goes back one.
  await expect(queueKey()).toHaveText(seen[3]!);
  await page.keyboard.press("k");
  await expect(queueKey()).toHaveText(seen[2]!);
  expect(seen.sort()).toEqual(["broken", "sarcastic", "wrong-1", "wrong-2"]);
  await walkTo("sarcastic");
  await expect(page.getByTestId("review-input")).toContainText("text:");
  await expect(page.getByTestId("review-expected")).toContainText('"label": "positive"');
  await expect(page.getByTestId("review-output")).toContainText('"label": "positive"');
  const failedCheck = page.locator('[data-testid="review-check"][data-passed="false"]');
  await expect(failedCheck).toContainText("sound failed");
  await expect(failedCheck).toContainText(JUDGE_REASON);
  await shot(page, "01-desktop");

  await page.setViewportSize(PHONE);
  await expect(queueKey()).toBeVisible();
  // Under the item, the decision would be a scroll away: Accept and Reject stay on screen.
  await page.evaluate(() => window.scrollTo(0, 0));
  await expect(decision().getByRole("button", { name: "Accept" })).toBeInViewport({ ratio: 1 });
  await expect(decision().getByRole("button", { name: "Reject" })).toBeInViewport({ ratio: 1 });
  const box = await page.getByTestId("review-output").boundingBox();
  expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
  await shot(page, "02-phone");
  await decision().scrollIntoViewIfNeeded();
  await shot(page, "03-phone-decision");
  await page.setViewportSize(DESKTOP);
});

test("a correction the schema refuses shows its 400 inline; an accepted correction and a rejection with a note are kept", async () => {
  await page.goto("/review");
  await walkTo("wrong-1");
  // e opens the editor with the model's answer and puts the cursor in it: keys are now the field's.
  await page.keyboard.press("e");
  const editor = decision().getByLabel("Corrected output");
  await expect(editor).toBeFocused();
  await expect(editor).toHaveValue('{\n  "label": "negative"\n}');
  await editor.fill('{ "label": "maybe" }');
  // Typed into the field, not a decision.
  await page.keyboard.press("a");
  await expect(editor).toHaveValue('{ "label": "maybe" }a');
  await expect(queueKey()).toHaveText("wrong-1");
  await editor.fill('{ "label": "maybe" }');
  await decision().getByRole("button", { name: "Accept" }).click();
  await expect(decision().getByRole("alert")).toContainText(/^output: does not match the batch's output_schema: \/label must be equal to one of the allowed values/);
  await expect(queueKey()).toHaveText("wrong-1");
  await shot(page, "04-desktop-refused-correction");
  await editor.fill('{ "label": "positive" }');
  // Escape leaves the editor: the next a is the Accept key, not a character of the JSON.
  await page.keyboard.press("Escape");
  await expect(editor).not.toBeFocused();
  await page.keyboard.press("a");
  await expect(page.getByTestId("review-notice")).toHaveText("Accepted wrong-1 with a corrected output.");
  await expect(page.getByTestId("review-position")).toContainText("3 waiting for review");

  await walkTo("wrong-2");
  await decision().getByLabel("Note").fill("The model read it right: negative is wrong, not bad at all is positive");
  await decision().getByRole("button", { name: "Reject" }).click();
  await expect(page.getByTestId("review-notice")).toHaveText("Rejected wrong-2.");

  const lines = await resultLines();
  const line = (key: string) => lines.find((l) => l.item_key === key)!;
  expect(line("wrong-1")).toMatchObject({ output: { label: "negative" }, review_state: "accepted", reviewed_output: { label: "positive" }, review_note: null });
  expect(line("wrong-2")).toMatchObject({
    review_state: "rejected",
    review_note: "The model read it right: negative is wrong, not bad at all is positive",
    reviewed_output: null,
  });
});

test("the a and r keys decide; a decision somebody made first is a 409 that moves on; the empty queue says so", async () => {
  await page.goto("/review");
  await expect(page.getByTestId("review-position")).toContainText("2 waiting for review");
  const keyed = (await queueKey().textContent())!;
  // Ctrl+Enter accepts from inside the editor, with the correction.
  await page.keyboard.press("e");
  await expect(decision().getByLabel("Corrected output")).toBeFocused();
  await decision().getByLabel("Corrected output").fill('{ "label": "negative" }');
  await page.keyboard.press("Control+Enter");
  await expect(page.getByTestId("review-notice")).toHaveText(`Accepted ${keyed} with a corrected output.`);

  // The last item: decided elsewhere (another tab, the API) before this page's r.
  const last = (await queueKey().textContent())!;
  const [entry] = (await pendingReviews()).items;
  expect(entry!.item_key).toBe(last);
  const elsewhere = await page.request.post(`/api/threads/${thread}/subagent-batches/${batchId}/items/${entry!.item_id}/review`, {
    data: { decision: "accept", version: entry!.review.version },
  });
  expect(elsewhere.status()).toBe(200);
  await page.keyboard.press("r");
  await expect(page.getByTestId("review-notice")).toContainText(`Someone decided ${last} before you did`);
  await expect(page.getByTestId("review-empty")).toHaveText(/Nothing is waiting for your review\./);
  await expect(page.getByRole("complementary", { name: "Threads" }).getByTestId("review-pending-count")).toHaveCount(0);
  await shot(page, "05-desktop-empty");

  const lines = await resultLines();
  const states = Object.fromEntries(lines.map((l) => [l.item_key, l.review_state]));
  expect(states).toEqual({ fine: null, "wrong-1": "accepted", "wrong-2": "rejected", [keyed]: "accepted", [last]: "accepted" });
  expect(lines.find((l) => l.item_key === keyed)!.reviewed_output).toEqual({ label: "negative" });
});

test("an item sent back to the queue keeps its earlier correction when it is accepted again without the editor", async () => {
  const items = await page.request.get(`/api/threads/${thread}/subagent-batches/${batchId}/items?limit=50`);
  expect(items.status()).toBe(200);
  const wrong1 = ((await items.json()) as { items: { id: string; item_key: string }[] }).items.find((i) => i.item_key === "wrong-1")!;
  const again = await page.request.post(`/api/threads/${thread}/subagent-batches/${batchId}/items/${wrong1.id}/review`, { data: { request: true } });
  expect(again.status(), await again.text()).toBe(200);
  await page.goto("/review");
  await expect(queueKey()).toHaveText("wrong-1");
  await expect(decision().getByLabel("Corrected output")).toHaveCount(0);
  await page.keyboard.press("a");
  await expect(page.getByTestId("review-notice")).toHaveText("Accepted wrong-1 with a corrected output.");
  const line = (await resultLines()).find((l) => l.item_key === "wrong-1")!;
  expect(line).toMatchObject({ review_state: "accepted", reviewed_output: { label: "positive" } });
});

test("1400×900 and 390×844: Edit input and retry on a failed item: a 400 names the field inline, a corrected input runs", async () => {
  const openEditor = async () => {
    await page.goto(`/threads/${thread}`);
    const panel = page.getByRole("complementary", { name: "Batches" });
    if (page.viewportSize()!.width < 768) await page.getByTestId("batches-drawer-toggle").click();
    const detail = panel.getByTestId("batch-detail");
    await detail.getByRole("tab", { name: "Items" }).click();
    const row = detail.locator('[data-testid="item-row"][data-item-key="broken"]');
    await expect(row).toHaveAttribute("data-status", "failed");
    await row.getByRole("button", { expanded: false }).click();
    await detail.getByTestId("item-detail").getByRole("button", { name: "Edit input and retry" }).click();
    return detail.getByTestId("retry-input-editor");
  };
  const editor = await openEditor();
  const input = editor.getByLabel("Input to retry with");
  // Prefilled with the whole item: its fields and its expected.
  await expect(input).toHaveValue(JSON.stringify({ text: ITEMS[4]!.text, expected: { label: "positive" } }, null, 2));
  await input.fill('{ "text": ["not", "a", "value"], "expected": { "label": "positive" } }');
  await editor.getByRole("button", { name: "Retry", exact: true }).click();
  await expect(editor.getByRole("alert")).toContainText(/^input\.text: /);
  await editor.scrollIntoViewIfNeeded();
  await shot(page, "06-desktop-retry-editor");

  await page.setViewportSize(PHONE);
  const phoneEditor = await openEditor();
  await phoneEditor.scrollIntoViewIfNeeded();
  const box = await phoneEditor.boundingBox();
  expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
  await shot(page, "07-phone-retry-editor");
  await page.setViewportSize(DESKTOP);

  const again = await openEditor();
  await again.getByLabel("Input to retry with").fill(JSON.stringify({ text: "Works fine now", expected: { label: "positive" } }));
  await again.getByRole("button", { name: "Retry", exact: true }).click();
  const row = page.locator('[data-testid="item-row"][data-item-key="broken"]');
  await expect(row).toHaveAttribute("data-status", "succeeded", { timeout: 60_000 });
  const retried = (await resultLines()).find((l) => l.item_key === "broken")!;
  expect(retried).toMatchObject({ status: "succeeded", input: { text: "Works fine now" }, expected: { label: "positive" }, verdict: "passed" });
});
