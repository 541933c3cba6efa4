import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The README's tour of the screens, step by step, in real Chromium against the production build,
 * a real worker and the simulator: the chat with a delegated task, the New batch dialog with a
 * CSV and its "Output and checks" section, the batch's Results (in the panel, and at full
 * width), batch items waiting for approval, a variant compared item by item, and an answer
 * waiting for a person's review. Each step is asserted; its screenshot (1400×900) goes to e2e/screenshots/, and with
 * TOUR_SCREENSHOTS=1 to docs/screenshots/, where the README shows them.
 */

const DIR = process.env.TOUR_SCREENSHOTS === "1" ? path.resolve("docs/screenshots") : SCREENSHOT_DIR;
mkdirSync(DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(DIR, `tour-${name}.png`) });

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");

// The README's worked example ("Batches that produce data"), through the dialog.
const MESSAGES_CSV = [
  "item_key,text,expected",
  "m1,WIN A FREE CRUISE! Reply now,spam",
  'm2,"Lunch at noon, as usual?",ham',
  "m3,Cheap pills online [[judge-fail]],spam",
  "m4,Minutes of Monday's meeting attached,ham",
].join("\n");
const SCHEMA = {
  type: "object",
  properties: { label: { enum: ["spam", "ham"] }, reason: { type: "string" } },
  required: ["label", "reason"],
};
const CHECKS = [
  { name: "label_matches", type: "equals", path: "/label", expected_path: "" },
  { name: "has_reason", type: "regex", path: "/reason", pattern: "\\w" },
  { name: "polite", type: "judge", rubric: "The reason is polite and specific." },
];

test.describe.configure({ mode: "serial" });
let page: Page;

test.beforeAll(async ({ browser }) => {
  // Batch items that call text/count_* wait for a person (tools.require_approval, step 4).
  await startWorker({ env: { FLOTILLA__TOOLS__REQUIRE_APPROVAL: '["text/count_*"]' } });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await signedInAccount(page, "tour");
});
test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1. the chat: the lead answers and delegates a task to a sub-agent", async () => {
  await page.goto("/");
  await page.getByRole("button", { name: "New thread" }).first().click();
  await expect(page).toHaveURL(/\/threads\//);
  await page.getByLabel("Message").fill("task: Find three facts about the Lisbon tram network");
  await page.keyboard.press("Enter");
  const card = page.getByTestId("subagent-card");
  await expect(card).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
  await expect(page.getByRole("button", { name: "Send" })).toBeVisible({ timeout: 30_000 });
  await expect(page.getByRole("heading", { level: 1 })).toHaveText("task: Find three facts about the Lisbon tram network");
  await shot(page, "1-chat");
});

test("2. New batch: a CSV of records, and Output and checks", async () => {
  await page.getByRole("button", { name: "New thread" }).first().click();
  await expect(page.getByText("New conversation")).toBeVisible();
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Is this message spam or ham? {{text}}");
  await dialog.getByLabel("Upload items file").setInputFiles({ name: "messages.csv", mimeType: "text/csv", buffer: Buffer.from(MESSAGES_CSV) });
  await expect(dialog.getByTestId("new-batch-file")).toHaveText("messages.csv (1 KB)");
  await expect(dialog.getByTestId("new-batch-count")).toContainText("4 items");
  await expect(dialog.getByTestId("new-batch-preview").first()).toHaveText("Is this message spam or ham? WIN A FREE CRUISE! Reply now");
  await dialog.getByText("Output and checks").click();
  await dialog.getByLabel("Output schema").fill(JSON.stringify(SCHEMA));
  await dialog.getByLabel("Checks").fill(`[\n${CHECKS.map((c) => `  ${JSON.stringify(c)}`).join(",\n")}\n]`);
  await expect(dialog.getByRole("alert")).toHaveCount(0);
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeEnabled();
  // The dialog scrolls: show the file, the section and the button, each field from its start.
  for (const field of ["Output schema", "Checks"])
    await dialog.getByLabel(field).evaluate((el) => {
      el.scrollTop = 0;
    });
  await dialog.getByLabel("Checks").blur();
  await dialog.getByRole("button", { name: "Start batch" }).scrollIntoViewIfNeeded();
  await shot(page, "2-new-batch");
});

/** The worked example's thread and batch (step 3), which the judging steps go on with. */
let spam: { thread: string; batch: string };

test("3. Results: fields, checks and verdicts; the batch's receipt in the chat", async () => {
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByRole("button", { name: "Start batch" }).click();
  await expect(dialog).toHaveCount(0);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  const thread = new URL(page.url()).pathname.split("/")[2]!;
  const listed = await page.request.get(`/api/threads/${thread}/subagent-batches`);
  spam = { thread, batch: ((await listed.json()) as { batches: { id: string }[] }).batches[0]!.id };
  await expect(detail.getByTestId("check-summary")).toContainText("label_matches 2 of 4 passed");
  await expect(detail.getByTestId("check-summary")).toContainText("polite 3 of 4 passed");
  await expect(detail.locator('[data-testid="result-row"][data-item-key="m1"]')).toHaveAttribute("data-verdict", "passed");
  await expect(detail.locator('[data-testid="result-row"][data-item-key="m2"]')).toHaveAttribute("data-verdict", "failed");
  const chat = page.getByRole("region", { name: "Chat" });
  await expect(chat.getByTestId("batch-receipt")).toContainText("4 items");
  await expect(chat.getByRole("heading", { level: 1 })).toHaveText("Is this message spam or ham? {{text}}");
  // The panel's table scrolls sideways past the fields to the checks and the verdict (the item column stays).
  const table = detail.getByTestId("results-scroll");
  await table.evaluate((el) => {
    el.scrollLeft = el.scrollWidth;
  });
  await table.scrollIntoViewIfNeeded();
  await page.waitForTimeout(500); // the progress bars' transition
  await shot(page, "3-results");

  // The whole table on a page of its own.
  await detail.getByRole("link", { name: "Open full width" }).click();
  const results = page.getByTestId("results-page");
  await expect(results).toHaveAttribute("data-status", "completed");
  await expect(results.getByTestId("result-row")).toHaveCount(4);
  await expect(results.getByRole("columnheader", { name: "label_matches" })).toBeInViewport();
  await expect(results.getByRole("columnheader", { name: "Verdict" })).toBeInViewport();
  await shot(page, "3b-results-full-width");
  await page.goBack();
});

test("4. Approvals: batch items wait for a person before a matching tool runs", async () => {
  const thread = await createThreadViaApi(page, "Word counts");
  const call = (text: string) => `Count the words [[tool:count_text {"text":"${text}"}]]`;
  const res = await page.request.post(`/api/threads/${thread}/subagent-batches`, {
    data: {
      submission_key: `tour-approvals-${Date.now()}`,
      items: [
        { item_key: "alpha", prompt: call("the quick brown fox") },
        { item_key: "beta", prompt: call("jumps over") },
        { item_key: "gamma", prompt: call("the lazy dog") },
      ],
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  await page.goto(`/threads/${thread}`);
  const waiting = page.getByTestId("waiting-approvals");
  await expect(waiting).toBeVisible({ timeout: 90_000 });
  await expect(waiting).toContainText("count_text");
  await expect(waiting.getByRole("button", { name: "Approve all 3" })).toBeVisible({ timeout: 30_000 });
  await waiting.scrollIntoViewIfNeeded();
  await shot(page, "4-approvals");
  await waiting.getByRole("button", { name: "Approve all 3" }).click();
  await expect(detailOf(page)).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
});

test("5. Judging: a variant of the worked example, compared item by item", async () => {
  // The simulator answers a schema's first enum value: listing ham first plays a model that says ham.
  const variant = await page.request.post(`/api/threads/${spam.thread}/subagent-batches/${spam.batch}/variant`, {
    data: { submission_key: `tour-variant-${Date.now()}`, output_schema: { ...SCHEMA, properties: { ...SCHEMA.properties, label: { enum: ["ham", "spam"] } } } },
  });
  expect(variant.status(), await variant.text()).toBe(201);
  const variantId = ((await variant.json()) as { id: string }).id;
  await page.goto(`/threads/${spam.thread}`);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  await expect(detail).toContainText(variantId.slice(0, 8));
  await detail.getByRole("button", { name: "Compare with…" }).click();
  await detail.getByTestId("compare-candidate").first().click();
  await expect(page).toHaveURL(new RegExp(`/batches/${spam.batch}/compare/${variantId}$`));
  await expect(page.getByTestId("compare-improved")).toHaveText("2 improved");
  await expect(page.getByTestId("compare-regressed")).toHaveText("1 regressed");
  await expect(page.getByTestId("compare-p-words")).toHaveText(/^Not a clear difference/);
  // Every label changed: m3 failed in both, but its answer differs too.
  await expect(page.getByTestId("pair-row")).toHaveCount(4);
  await shot(page, "5-compare");
});

test("6. Review: an answer its checks failed waits for a person, with the judge's reasons", async () => {
  const base = `/api/threads/${spam.thread}/subagent-batches/${spam.batch}`;
  const items = (await (await page.request.get(`${base}/items?limit=10`)).json()) as { items: { id: string; item_key: string }[] };
  const m2 = items.items.find((i) => i.item_key === "m2")!;
  const queued = await page.request.post(`${base}/items/${m2.id}/review`, { data: { request: true } });
  expect(queued.status(), await queued.text()).toBe(200);
  await page.goto("/review");
  await expect(page.getByTestId("review-item-key")).toHaveText("m2");
  await expect(page.getByRole("complementary", { name: "Threads" }).getByTestId("review-pending-count")).toContainText("1");
  await expect(page.getByRole("region", { name: "Decision" }).getByRole("button", { name: "Accept" })).toBeVisible();
  await shot(page, "6-review");
});
