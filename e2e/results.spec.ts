import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect, type Locator, type Page, test } from "@playwright/test";
import Papa from "papaparse";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Batches that produce data, in real Chromium against the production build, a real worker and
 * the simulator: a typed batch with a regex and an equals check (one item answers a wrong label
 * through [[json:...]]), its Results table (headers, the Verdict filter, a check's reason,
 * "Retry failed checks", "Download CSV" parsed with papaparse), on a desktop and a phone; and
 * the New batch dialog with a CSV of fields and expected values, an output schema and checks.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string, fullPage = true) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `results-${name}.png`), fullPage });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

const OUTPUT_SCHEMA = {
  type: "object",
  properties: { label: { type: "string", enum: ["positive", "negative"] }, summary: { type: "string" } },
  required: ["label", "summary"],
};
const CHECKS = [
  { name: "label_format", type: "regex", pattern: "^(positive|negative)$", path: "/label" },
  { name: "label_matches", type: "equals", path: "/label", expected_path: "/label" },
];
/** Three reviews; the simulator answers the first enum value ("positive") unless told otherwise. */
const ITEMS = [
  { item_key: "r1", text: "Loved it, would buy again", lang: "en", expected: { label: "positive" } },
  { item_key: "r2", text: "Works as described", lang: "en", expected: { label: "positive" } },
  // Answers "negative" verbatim where "positive" is expected: label_matches fails, label_format passes.
  {
    item_key: "r3",
    text: 'Arrived broken [[json:{"label":"negative","summary":"broken on arrival"}]]',
    lang: "en",
    expected: { label: "positive" },
  },
];

let page: Page;
let thread: string;
let batchId: string;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const rowsOf = (scope: Locator) => scope.getByTestId("result-row");

async function batchState(p: Page, threadId: string, id: string) {
  const res = await p.request.get(`/api/threads/${threadId}/subagent-batches/${id}`);
  expect(res.status()).toBe(200);
  return (await res.json()) as { status: string; verdicts: { passed: number; failed: number }; counts: Record<string, number> };
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "results");
  thread = await createThreadViaApi(page, "Typed batch");
  const res = await page.request.post(`/api/threads/${thread}/subagent-batches`, {
    data: {
      submission_key: `results-${Date.now()}`,
      prompt_template: "Classify this review ({{lang}}): {{text}}",
      items: ITEMS,
      output_schema: OUTPUT_SCHEMA,
      checks: CHECKS,
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
  await expect.poll(async () => (await batchState(page, thread, batchId)).status, { timeout: 90_000 }).toBe("completed");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900: the Results table has a column per field and check, and a failed check says why", async () => {
  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed");
  // A batch that produces data opens on its Results.
  await expect(detail.getByRole("tab", { name: "Results" })).toHaveAttribute("aria-selected", "true");
  const table = detail.getByRole("table");
  const headers = await table.getByRole("columnheader").allTextContents();
  expect(headers).toEqual(["Item", "text", "lang", "label", "summary", "label_format", "label_matches", "Verdict", "Status", "Cost", "Duration"]);
  const rows = rowsOf(detail);
  await expect(rows).toHaveCount(3);
  const r1 = rows.filter({ has: page.getByRole("rowheader", { name: "r1" }) });
  await expect(r1).toHaveAttribute("data-verdict", "passed");
  await expect(r1.getByRole("cell").nth(0)).toHaveText("Loved it, would buy again");
  await expect(r1.getByRole("cell").nth(2)).toHaveText("positive");

  const r3 = detail.locator('[data-testid="result-row"][data-item-key="r3"]');
  await expect(r3).toHaveAttribute("data-verdict", "failed");
  await expect(r3.getByRole("cell").nth(2)).toHaveText("negative");
  await expect(r3.getByRole("cell").nth(3)).toHaveText("broken on arrival");
  // ✗ names its check; its reason is the button's description and shows on hover and focus.
  const failedMark = r3.getByRole("button", { name: "label_matches failed" });
  await expect(failedMark).toHaveAccessibleDescription(/.+/);
  await failedMark.hover();
  const tip = page.getByRole("tooltip");
  await expect(tip).toBeVisible();
  await expect(tip).toHaveText(/.+/);
  await page.mouse.move(0, 0);
  await expect(tip).toBeHidden();
  await failedMark.focus();
  await expect(tip).toBeVisible();

  await expect(detail.getByTestId("check-summary")).toContainText("label_matches 2 of 3 passed");
  await expect(detail.getByTestId("check-summary")).toContainText("label_format 3 of 3 passed");
  await shot(page, "01-desktop", false);
  await failedMark.blur();
});

test("1400×900: Verdict = failed shows only the failing row; Status filters too", async () => {
  const detail = detailOf(page);
  const options = await detail.getByLabel("Verdict", { exact: true }).locator("option").allTextContents();
  expect(options).toEqual(["All", "Passed (2)", "Failed (1)"]);
  await detail.getByLabel("Verdict", { exact: true }).selectOption("failed");
  const rows = rowsOf(detail);
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toHaveAttribute("data-item-key", "r3");
  await expect(detail.getByTestId("results-shown")).toHaveText("Showing 1 of 1");
  await detail.getByLabel("Verdict", { exact: true }).selectOption("passed");
  await expect(rows).toHaveCount(2);
  await detail.getByLabel("Status", { exact: true }).selectOption("failed");
  await expect(detail.getByText("No items match these filters.")).toBeVisible();
  await detail.getByLabel("Status", { exact: true }).selectOption("all");
  await detail.getByLabel("Verdict", { exact: true }).selectOption("all");
  await expect(rows).toHaveCount(3);
});

test("Download CSV: results.csv has the header and every row", async () => {
  const detail = detailOf(page);
  const [download] = await Promise.all([page.waitForEvent("download"), detail.getByRole("link", { name: "Download CSV" }).click()]);
  expect(download.suggestedFilename()).toMatch(/^batch-[0-9a-f-]{36}-results\.csv$/);
  const text = readFileSync((await download.path())!, "utf8");
  const parsed = Papa.parse<Record<string, string>>(text.replace(/^\uFEFF/, ""), { header: true, skipEmptyLines: true });
  expect(parsed.errors).toEqual([]);
  expect(parsed.meta.fields).toEqual([
    "item_key",
    "status",
    "text",
    "lang",
    "expected",
    "label",
    "summary",
    "label_format",
    "label_matches",
    "verdict",
    "attempts",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "duration_ms",
    "error",
  ]);
  expect(parsed.data.map((r) => [r.item_key, r.label, r.label_matches, r.verdict])).toEqual([
    ["r1", "positive", "passed", "passed"],
    ["r2", "positive", "passed", "passed"],
    ["r3", "negative", "failed", "failed"],
  ]);
});

test("Retry failed checks re-queues the failing item and says how many", async () => {
  const detail = detailOf(page);
  const r3 = detail.locator('[data-testid="result-row"][data-item-key="r3"]');
  type Row = { item_key: string; finished_at: string | null; verdict: string | null };
  const r3Now = async (): Promise<Row> => {
    const res = await page.request.get(`/api/threads/${thread}/subagent-batches/${batchId}/items?limit=50`);
    return ((await res.json()) as { items: Row[] }).items.find((i) => i.item_key === "r3")!;
  };
  const before = await r3Now();
  await detail.getByRole("button", { name: "Retry failed checks" }).click();
  await expect(detail.getByTestId("retry-checks-feedback")).toHaveText("Retried 1 item.");
  // It runs again ([[json:...]] answers the same) and finishes later with a failed verdict again.
  await expect
    .poll(async () => {
      const r = await r3Now();
      return `${(r.finished_at ?? "") > (before.finished_at ?? "")} ${r.verdict}`;
    }, { timeout: 60_000 })
    .toBe("true failed");
  await expect(r3).toHaveAttribute("data-verdict", "failed", { timeout: 30_000 });
  await expect(detail).toHaveAttribute("data-status", "completed");
  // Nothing failed is left unretried... until the same answer fails again: the button follows the count.
  await expect(detail.getByTestId("check-summary")).toContainText("label_matches 2 of 3 passed");
});

test("390×844: the table scrolls sideways in its box with the item column in view; controls on screen", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  const detail = detailOf(page);
  await expect(detail).toBeVisible();
  await expect(rowsOf(detail)).toHaveCount(3);
  const box = detail.getByTestId("results-scroll");
  const geometry = await box.evaluate((el) => ({ right: el.getBoundingClientRect().right, scroll: el.scrollWidth, client: el.clientWidth }));
  expect(geometry.right).toBeLessThanOrEqual(PHONE.width);
  expect(geometry.scroll).toBeGreaterThan(geometry.client);
  for (const control of [
    detail.getByLabel("Status", { exact: true }),
    detail.getByLabel("Verdict", { exact: true }),
    detail.getByRole("button", { name: "Retry failed checks" }),
    detail.getByRole("link", { name: "Download CSV" }),
  ]) {
    await control.scrollIntoViewIfNeeded();
    const b = (await control.boundingBox())!;
    expect(b.x).toBeGreaterThanOrEqual(0);
    expect(b.x + b.width).toBeLessThanOrEqual(PHONE.width);
  }
  // Scrolled to the far right, the item column stays put at the left edge of the box.
  const itemCell = detail.getByRole("rowheader", { name: "r3" });
  const left0 = (await itemCell.boundingBox())!.x;
  await box.evaluate((el) => {
    el.scrollLeft = el.scrollWidth;
  });
  await expect.poll(async () => Math.round((await itemCell.boundingBox())!.x)).toBe(Math.round(left0));
  // A failed check's reason is readable on a tap, inside the window.
  const mark = detail.locator('[data-testid="result-row"][data-item-key="r3"]').getByRole("button", { name: "label_matches failed" });
  await mark.scrollIntoViewIfNeeded();
  await mark.click();
  const tip = page.getByRole("tooltip");
  await expect(tip).toBeVisible();
  const t = (await tip.boundingBox())!;
  expect(t.x).toBeGreaterThanOrEqual(0);
  expect(t.x + t.width).toBeLessThanOrEqual(PHONE.width);
  await shot(page, "02-phone", false);
  await page.setViewportSize(DESKTOP);
});

test("New batch dialog: a CSV of fields and expected values, an output schema and checks", async () => {
  await page.goto(`/threads/${thread}`);
  const panel = panelOf(page);
  await panel.getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("Classify this review ({{lang}}): {{text}}");
  const records = [
    "item_key,text,lang,expected",
    'c1,"Great value, fast shipping",en,"{""label"":""positive""}"',
    'c2,"Two lines:\nfine, then broke",en,"{""label"":""positive""}"',
    'c3,"Stopped working [[json:{""label"":""negative"",""summary"":""x""}]]",en,"{""label"":""positive""}"',
  ];
  const csv = records.join("\n");
  await dialog.getByLabel("Upload items file").setInputFiles({ name: "reviews.csv", mimeType: "text/csv", buffer: Buffer.from(csv) });
  await expect(dialog.getByTestId("new-batch-count")).toContainText("3 items");
  await expect(dialog.getByTestId("new-batch-fields")).toContainText("{{text}}, {{lang}}");
  await expect(dialog.getByTestId("new-batch-preview").first()).toHaveText("Classify this review (en): Great value, fast shipping");

  await dialog.getByText("Output and checks").click();
  // A typo is named before anything is sent.
  await dialog.getByLabel("Output schema").fill('{"type": "object",');
  await expect(dialog.getByRole("alert")).toContainText("output_schema: not valid JSON");
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeDisabled();
  await dialog.getByLabel("Output schema").fill(JSON.stringify(OUTPUT_SCHEMA, null, 2));
  await dialog.getByLabel("Checks").fill('[{"name": "label_matches", "type": "equals"}]');
  await expect(dialog.getByRole("alert")).toContainText("checks.0.path");
  await dialog.getByLabel("Checks").fill(JSON.stringify(CHECKS));
  await expect(dialog.getByRole("alert")).toHaveCount(0);
  await shot(page, "03-dialog-csv");

  // A bad row is named by its line (line 3 starts a quoted field over two lines; line 5 is short).
  await dialog
    .getByLabel("Upload items file")
    .setInputFiles({ name: "bad.csv", mimeType: "text/csv", buffer: Buffer.from([...records.slice(0, 3), "c4,only two"].join("\n")) });
  await expect(dialog.getByTestId("new-batch-errors")).toContainText("line 5: 2 fields where the header has 4");
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeDisabled();
  await page.setViewportSize(PHONE);
  await shot(page, "04-dialog-phone-bad-row", false);
  await page.setViewportSize(DESKTOP);

  await dialog.getByLabel("Upload items file").setInputFiles({ name: "reviews.csv", mimeType: "text/csv", buffer: Buffer.from(csv) });
  await expect(dialog.getByTestId("new-batch-count")).toContainText("3 items");
  await dialog.getByRole("button", { name: "Start batch" }).click();
  await expect(dialog).toHaveCount(0);
  const detail = detailOf(page);
  await expect(detail).not.toHaveAttribute("data-batch-id", batchId);
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 90_000 });
  await expect(rowsOf(detail)).toHaveCount(3);
  await expect(detail.locator('[data-testid="result-row"][data-item-key="c3"]')).toHaveAttribute("data-verdict", "failed");
  await expect(detail.locator('[data-testid="result-row"][data-item-key="c2"]')).toHaveAttribute("data-verdict", "passed");
  await expect(detail.getByTestId("check-summary")).toContainText("label_matches 2 of 3 passed");
});
