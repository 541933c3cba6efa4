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
 * "Retry failed checks" (asked first), "Download CSV" parsed with papaparse), on a desktop and a phone; and
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
  expect(headers).toEqual([
    "Item",
    "text",
    "lang",
    "Expected",
    "label",
    "summary",
    "Answer by",
    "label_format",
    "label_matches",
    "Verdict",
    "Review",
    "Status",
    "Cost",
    "Duration",
  ]);
  const rows = rowsOf(detail);
  await expect(rows).toHaveCount(3);
  const r1 = rows.filter({ has: page.getByRole("rowheader", { name: "r1" }) });
  await expect(r1).toHaveAttribute("data-verdict", "passed");
  await expect(r1.getByRole("cell").nth(0)).toHaveText("Loved it, would buy again");
  await expect(r1.getByTestId("result-expected")).toHaveText('{"label":"positive"}');
  await expect(r1.getByRole("cell").nth(3)).toHaveText("positive");
  await expect(r1.getByTestId("answer-by")).toHaveText("model");

  const r3 = detail.locator('[data-testid="result-row"][data-item-key="r3"]');
  await expect(r3).toHaveAttribute("data-verdict", "failed");
  await expect(r3.getByRole("cell").nth(3)).toHaveText("negative");
  await expect(r3.getByRole("cell").nth(4)).toHaveText("broken on arrival");
  // ✗ names its check; its reason is the button's description and shows on hover and focus.
  const failedMark = r3.getByRole("button", { name: "label_matches failed" });
  await expect(failedMark).toHaveAccessibleDescription(/.+/);
  // The reason also reads under the ✗, without a hover.
  const reason = r3.getByTestId("check-failure");
  await expect(reason).toBeVisible();
  await expect(reason).toHaveText(/\S/);
  await expect(r1.getByTestId("check-failure")).toHaveCount(0);
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
  // The batch's overall pass rate: items that passed every check.
  await expect(detail.getByTestId("overall-pass-rate")).toHaveText("All checks 2 of 3 items passed (67%)");
  await shot(page, "01-desktop", false);
  await failedMark.blur();
});

test("1400×900: each row shows its review state and the final answer: a person's correction, marked as theirs, over the model's", async () => {
  const base = `/api/threads/${thread}/subagent-batches/${batchId}`;
  type Row = { id: string; item_key: string; review: { version: number } | null };
  const rowOf = async (key: string): Promise<Row> =>
    ((await (await page.request.get(`${base}/items?limit=50`)).json()) as { items: Row[] }).items.find((i) => i.item_key === key)!;
  for (const key of ["r1", "r2"]) {
    const queued = await page.request.post(`${base}/items/${(await rowOf(key)).id}/review`, { data: { request: true } });
    expect(queued.status(), await queued.text()).toBe(200);
  }
  const r1 = await rowOf("r1");
  const decided = await page.request.post(`${base}/items/${r1.id}/review`, {
    data: { decision: "accept", version: r1.review!.version, output: { label: "negative", summary: "fixed by a person" } },
  });
  expect(decided.status(), await decided.text()).toBe(200);

  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  const row = (key: string) => detail.locator(`[data-testid="result-row"][data-item-key="${key}"]`);
  await expect(row("r1").getByTestId("result-review")).toHaveText("corrected");
  // The person's answer replaces the model's ("positive") in the output columns, and says whose it is.
  await expect(row("r1").getByRole("cell").nth(3)).toHaveText("negative");
  await expect(row("r1").getByRole("cell").nth(4)).toHaveText("fixed by a person");
  await expect(row("r1").getByTestId("answer-by")).toHaveText("person");
  await expect(row("r2").getByTestId("result-review")).toHaveText("pending");
  await expect(row("r2").getByTestId("answer-by")).toHaveText("model");
  await expect(row("r3").getByTestId("result-review")).toHaveText("");
  // In view: the answer, who gave it, and the review (the box scrolls sideways to them).
  await row("r1").getByTestId("result-review").scrollIntoViewIfNeeded();
  await row("r1").getByRole("cell").nth(3).scrollIntoViewIfNeeded();
  await shot(page, "01b-reviews-desktop", false);

  const r2 = await rowOf("r2");
  const rejected = await page.request.post(`${base}/items/${r2.id}/review`, { data: { decision: "reject", version: r2.review!.version } });
  expect(rejected.status(), await rejected.text()).toBe(200);
  await page.reload();
  await expect(row("r2").getByTestId("result-review")).toHaveText("rejected");
  await expect(row("r2").getByRole("cell").nth(3)).toHaveText("positive");
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

test("1400×900: Check filters by one check's result and Search finds text in the key, input or answer (a person's correction too)", async () => {
  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  const rows = rowsOf(detail);
  await expect(rows).toHaveCount(3);
  const keys = () => rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-item-key")));
  const check = detail.getByLabel("Check", { exact: true });
  expect(await check.locator("option").allTextContents()).toEqual([
    "Any",
    "label_format passed (3)",
    "label_format failed (0)",
    "label_matches passed (2)",
    "label_matches failed (1)",
  ]);
  await check.selectOption("label_matches:failed");
  await expect.poll(keys).toEqual(["r3"]);
  await check.selectOption("label_matches:passed");
  await expect.poll(keys).toEqual(["r1", "r2"]);
  await check.selectOption("all");
  await expect(rows).toHaveCount(3);

  const search = detail.getByLabel("Search results");
  for (const [text, want] of [
    ["BROKEN", ["r3"]], // the input and the answer, any case
    ["r2", ["r2"]], // the key
    ["fixed by a person", ["r1"]], // the correction, not only the model's answer
  ] as const) {
    await search.fill(text);
    await search.press("Enter");
    await expect.poll(keys).toEqual(want);
  }
  // With the check filter: both apply.
  await search.fill("positive");
  await search.press("Enter");
  await check.selectOption("label_matches:failed");
  await expect(detail.getByText("No items match these filters.")).toBeVisible();
  await detail.getByTestId("results-scroll").scrollIntoViewIfNeeded();
  await shot(page, "01c-check-and-search-desktop", false);
  await check.selectOption("all");
  await search.fill("");
  await expect(rows).toHaveCount(3);
});

test("Download CSV: results.csv has the header and every row", async () => {
  const detail = detailOf(page);
  const [download] = await Promise.all([page.waitForEvent("download"), detail.getByRole("link", { name: "Download CSV" }).click()]);
  expect(download.suggestedFilename()).toBe(`batch-${batchId}-results.csv`);
  const bytes = readFileSync((await download.path())!);
  // A UTF-8 byte order mark first, so a spreadsheet does not read the file in the local code page.
  expect([...bytes.subarray(0, 3)]).toEqual([0xef, 0xbb, 0xbf]);
  const parsed = Papa.parse<Record<string, string>>(bytes.toString("utf8").replace(/^\uFEFF/, ""), { header: true, skipEmptyLines: true });
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
    "cached_input_tokens",
    "cache_write_tokens",
    "cost_usd",
    "duration_ms",
    "error",
    "review_state",
    "review_note",
    "reviewed_output.label",
    "reviewed_output.summary",
  ]);
  // Files use the API's words (the screen says Done).
  expect(parsed.data.map((r) => r.status)).toEqual(["succeeded", "succeeded", "succeeded"]);
  expect(parsed.data.map((r) => [r.item_key, r.label, r.label_matches, r.verdict])).toEqual([
    ["r1", "positive", "passed", "passed"],
    ["r2", "positive", "passed", "passed"],
    ["r3", "negative", "failed", "failed"],
  ]);
});

test("Downloads follow the filters: Verdict = failed gives the failing row only, Done + Passed the others, in files named for the batch and the filters", async () => {
  const detail = detailOf(page);
  await detail.getByLabel("Verdict", { exact: true }).selectOption("failed");
  await expect(rowsOf(detail)).toHaveCount(1);
  const [csv] = await Promise.all([page.waitForEvent("download"), detail.getByRole("link", { name: "Download CSV" }).click()]);
  expect(csv.suggestedFilename()).toBe(`batch-${batchId}-results.verdict-failed.csv`);
  expect(new URL(csv.url()).search).toBe("?verdict=failed");
  const parsed = Papa.parse<Record<string, string>>(readFileSync((await csv.path())!, "utf8").replace(/^\uFEFF/, ""), {
    header: true,
    skipEmptyLines: true,
  });
  expect(parsed.errors).toEqual([]);
  expect(parsed.data.map((r) => [r.item_key, r.verdict])).toEqual([["r3", "failed"]]);

  await detail.getByLabel("Status", { exact: true }).selectOption("succeeded");
  await detail.getByLabel("Verdict", { exact: true }).selectOption("passed");
  await expect(rowsOf(detail)).toHaveCount(2);
  const [jsonl] = await Promise.all([page.waitForEvent("download"), detail.getByRole("link", { name: "Download JSONL" }).click()]);
  expect(jsonl.suggestedFilename()).toBe(`batch-${batchId}-results.succeeded.verdict-passed.jsonl`);
  expect(new URL(jsonl.url()).search).toBe("?status=succeeded&verdict=passed");
  const lines = readFileSync((await jsonl.path())!, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { item_key: string; status: string; verdict: string });
  expect(lines.map((l) => [l.item_key, l.status, l.verdict])).toEqual([
    ["r1", "succeeded", "passed"],
    ["r2", "succeeded", "passed"],
  ]);
  await detail.getByLabel("Status", { exact: true }).selectOption("all");
  await detail.getByLabel("Verdict", { exact: true }).selectOption("all");
  await expect(rowsOf(detail)).toHaveCount(3);
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
  // It asks first, as Cancel does.
  const ask = page.getByRole("alertdialog", { name: "Retry the item that failed a check?" });
  await expect(ask.getByTestId("retry-checks-confirm")).toContainText("It will run again from the start");
  await ask.getByRole("button", { name: "Retry 1" }).click();
  await expect(ask).toHaveCount(0);
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
    detail.getByLabel("Check", { exact: true }),
    detail.getByLabel("Search results"),
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

test("Items view: an opened item shows its verdict and each check with its reason", async () => {
  await page.goto(`/threads/${thread}`);
  const detail = detailOf(page);
  await detail.getByRole("tab", { name: "Items" }).click();
  const r3 = detail.locator('[data-testid="item-row"][data-item-key="r3"]');
  // A CSV row reads as its fields, name: value, not as the JSON it is stored as.
  await expect(r3.getByTestId("item-input")).toHaveText(`text: ${ITEMS[2]!.text} · lang: en`);
  await r3.getByRole("button", { expanded: false }).click();
  const input = detail.getByTestId("item-detail").getByTestId("item-detail-input");
  await expect(input.locator("dt")).toHaveText(["text:", "lang:"]);
  await expect(input.locator("dd")).toHaveText([ITEMS[2]!.text, "en"]);
  await expect(input).not.toContainText('{"text"');
  await input.scrollIntoViewIfNeeded();
  await shot(page, "items-fields-desktop", false);
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  await detail.getByRole("tab", { name: "Items" }).click();
  await r3.getByRole("button", { expanded: false }).click();
  await input.scrollIntoViewIfNeeded();
  await expect(input.locator("dt")).toHaveText(["text:", "lang:"]);
  await shot(page, "items-fields-phone", false);
  await page.setViewportSize(DESKTOP);
  await page.goto(`/threads/${thread}`);
  await detail.getByRole("tab", { name: "Items" }).click();
  await r3.getByRole("button", { expanded: false }).click();
  const checks = detail.getByTestId("item-detail").getByTestId("item-detail-checks");
  await expect(checks.getByTestId("verdict")).toHaveText("failed");
  await expect(checks.getByTestId("item-detail-check")).toHaveCount(2);
  await expect(checks.locator('[data-testid="item-detail-check"][data-passed="true"]')).toContainText("label_format passed");
  await expect(checks.locator('[data-testid="item-detail-check"][data-passed="false"]')).toContainText(
    'label_matches failed · /label is "negative", expected "positive"',
  );
  await checks.scrollIntoViewIfNeeded();
  await shot(page, "05-item-checks", false);
});

/** The batch: one input field, three output fields and three checks (fifteen columns with Expected, Answer by and Review). */
const WIDE_SCHEMA = {
  type: "object",
  properties: {
    label: { type: "string", enum: ["positive", "negative"] },
    summary: { type: "string" },
    topic: { type: "string" },
  },
  required: ["label", "summary", "topic"],
};
const WIDE_CHECKS = [
  ...CHECKS,
  { name: "has_summary", type: "regex", pattern: ".", path: "/summary" },
];
let wideThread: string;
let wideBatch: string;

/** Every column header lies inside the table's box and the window (nothing behind a sideways scroll). */
async function expectNoClippedColumns(scope: Locator) {
  const box = scope.getByTestId("results-scroll");
  const fit = await box.evaluate((el) => ({ scroll: el.scrollWidth, client: el.clientWidth }));
  expect(fit.scroll).toBeLessThanOrEqual(fit.client);
  for (const th of await scope.getByRole("columnheader").all()) await expect(th).toBeInViewport({ ratio: 1 });
}

test("Open full width (1400×900): a fifteen-column batch on a page of its own, with the panel's filters, pass rates and every column", async () => {
  wideThread = await createThreadViaApi(page, "Wide batch");
  const res = await page.request.post(`/api/threads/${wideThread}/subagent-batches`, {
    data: {
      submission_key: `results-wide-${Date.now()}`,
      prompt_template: "Classify this review: {{text}}",
      items: [
        ...ITEMS.slice(0, 2).map(({ item_key, text, expected }) => ({ item_key, text, expected })),
        {
          item_key: "r3",
          text: 'Arrived broken [[json:{"label":"negative","summary":"broken on arrival","topic":"shipping"}]]',
          expected: { label: "positive" },
        },
      ],
      output_schema: WIDE_SCHEMA,
      checks: WIDE_CHECKS,
    },
  });
  expect(res.status(), await res.text()).toBe(201);
  wideBatch = ((await res.json()) as { id: string }).id;
  await expect.poll(async () => (await batchState(page, wideThread, wideBatch)).status, { timeout: 90_000 }).toBe("completed");

  await page.goto(`/threads/${wideThread}`);
  const detail = detailOf(page);
  // In the panel most of the fifteen columns sit behind a sideways scroll (measured once the rows are in).
  await expect(rowsOf(detail)).toHaveCount(3);
  await expect.poll(() => detail.getByTestId("results-scroll").evaluate((el) => el.scrollWidth / el.clientWidth)).toBeGreaterThan(2);
  await detail.getByLabel("Verdict", { exact: true }).selectOption("failed");
  await expect(rowsOf(detail)).toHaveCount(1);
  await detail.getByRole("link", { name: "Open full width" }).click();
  await expect(page).toHaveURL(`/threads/${wideThread}/batches/${wideBatch}/results?verdict=failed`);
  const results = page.getByTestId("results-page");
  await expect(page.getByRole("heading", { level: 1 })).toHaveText(`Results of batch ${wideBatch.slice(0, 8)}`);
  // The filter came along: only the failing row.
  await expect(results.getByLabel("Verdict", { exact: true })).toHaveValue("failed");
  await expect(rowsOf(results)).toHaveCount(1);
  await expect(rowsOf(results).first()).toHaveAttribute("data-item-key", "r3");
  await results.getByLabel("Verdict", { exact: true }).selectOption("all");
  await expect(rowsOf(results)).toHaveCount(3);
  await expect(page).toHaveURL(`/threads/${wideThread}/batches/${wideBatch}/results`);
  await expect(results.getByTestId("check-summary")).toContainText("label_matches 2 of 3 passed (67%)");
  await expect(results.getByTestId("check-summary")).toContainText("has_summary 3 of 3 passed (100%)");
  const headers = await results.getByRole("columnheader").allTextContents();
  expect(headers).toEqual([
    "Item",
    "text",
    "Expected",
    "label",
    "summary",
    "topic",
    "Answer by",
    "label_format",
    "label_matches",
    "has_summary",
    "Verdict",
    "Review",
    "Status",
    "Cost",
    "Duration",
  ]);
  // The whole table shows at this width: no column behind a sideways scroll.
  await expectNoClippedColumns(results);
  await expect(results.getByRole("button", { name: "Retry failed checks" })).toBeVisible();
  for (const name of ["Download CSV", "Download JSONL"]) await expect(results.getByRole("link", { name })).toBeVisible();
  await shot(page, "06-full-width-desktop", false);

  // The filters live in the address: a reload keeps them.
  await results.getByLabel("Status", { exact: true }).selectOption("succeeded");
  await results.getByLabel("Verdict", { exact: true }).selectOption("passed");
  await expect(page).toHaveURL(`/threads/${wideThread}/batches/${wideBatch}/results?status=succeeded&verdict=passed`);
  await page.reload();
  await expect(rowsOf(page.getByTestId("results-page"))).toHaveCount(2);

  await page.getByRole("link", { name: "Back to Wide batch" }).click();
  await expect(page).toHaveURL(`/threads/${wideThread}`);
  await expect(detailOf(page)).toBeVisible();
});

test("Open full width (390×844): the page is readable on a phone; the table scrolls in its own box with the item column in view", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${wideThread}/batches/${wideBatch}/results`);
  const results = page.getByTestId("results-page");
  await expect(rowsOf(results)).toHaveCount(3);
  await expect(page.getByRole("heading", { level: 1 })).toBeInViewport();
  await expect(page.getByRole("link", { name: "Back to Wide batch" })).toBeInViewport();
  // Nothing widens the page: only the table's box scrolls sideways.
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(PHONE.width);
  const box = results.getByTestId("results-scroll");
  const geometry = await box.evaluate((el) => ({ right: el.getBoundingClientRect().right, scroll: el.scrollWidth, client: el.clientWidth }));
  expect(geometry.right).toBeLessThanOrEqual(PHONE.width);
  expect(geometry.scroll).toBeGreaterThan(geometry.client);
  for (const control of [
    results.getByLabel("Status", { exact: true }),
    results.getByLabel("Verdict", { exact: true }),
    results.getByRole("button", { name: "Retry failed checks" }),
    results.getByRole("link", { name: "Download CSV" }),
    results.getByRole("link", { name: "Download JSONL" }),
  ]) {
    await control.scrollIntoViewIfNeeded();
    const b = (await control.boundingBox())!;
    expect(b.x).toBeGreaterThanOrEqual(0);
    expect(b.x + b.width).toBeLessThanOrEqual(PHONE.width);
  }
  await results.evaluate((el) => el.parentElement?.scrollTo(0, 0));
  await shot(page, "07-full-width-phone", false);
  // Scrolled to the far right, the item column stays put and the last column comes into view.
  const itemCell = results.getByRole("rowheader", { name: "r3" });
  const left0 = (await itemCell.boundingBox())!.x;
  await box.evaluate((el) => {
    el.scrollLeft = el.scrollWidth;
  });
  await expect.poll(async () => Math.round((await itemCell.boundingBox())!.x)).toBe(Math.round(left0));
  const last = (await results.getByRole("columnheader", { name: "Duration" }).boundingBox())!;
  const boxRight = await box.evaluate((el) => el.getBoundingClientRect().right);
  expect(last.x).toBeGreaterThan(0);
  expect(last.x + last.width).toBeLessThanOrEqual(boxRight + 1);
  await shot(page, "08-full-width-phone-scrolled", false);
  await page.setViewportSize(DESKTOP);
});

test("Open full width: another account's batch is not found", async ({ browser }) => {
  const other = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(other, "results-other");
  await other.goto(`/threads/${wideThread}/batches/${wideBatch}/results`);
  await expect(other.getByRole("heading", { name: "Not found" })).toBeVisible();
  await expect(other.getByTestId("results-page")).toHaveCount(0);
  await other.close();
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
  await expect(dialog.getByRole("alert")).toContainText("Output schema: not valid JSON");
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeDisabled();
  await dialog.getByLabel("Output schema").fill(JSON.stringify(OUTPUT_SCHEMA, null, 2));
  await dialog.getByLabel("Checks").fill('[{"name": "label_matches", "type": "equals"}]');
  await expect(dialog.getByRole("alert")).toContainText("Check 1 path");
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
