import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Variants and comparisons in the browser, in real Chromium against the production build, a real
 * worker and the simulator. A batch made in the New batch dialog (a CSV of two fields, a regex
 * check "ends with !"), its "Run a variant…" (the dialog prefilled, the items the original's, a
 * 400 under the template, then the template switched to the other field), and "Compare with…" to
 * the comparison page: improved / regressed with the p-value in words, each check's change, the
 * Change filter, Load more, a long output clipped with "Show all", an output that looks like HTML
 * shown as text; at 1400×900 and 390×844 with nothing past the window.
 *
 * With the simulator, `[[echo]]` answers the rest of the prompt verbatim, so the template picks
 * the answer: A's `[[echo]]{{a}}` and B's `[[echo]]{{b}}`. The "fix" items end with "!" only in b
 * (improved), the "keep" items only in a (regressed), the "same" ones in neither (same answer).
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string, fullPage = false) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `compare-${name}.png`), fullPage });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

const LONG = `fix-long ${"a sentence that goes on and on ".repeat(16).trim()}`;
const ROWS: { key: string; a: string; b: string }[] = [
  ...Array.from({ length: 30 }, (_, i) => ({ key: `fix-${String(i + 1).padStart(2, "0")}`, a: `fix ${i + 1}`, b: `fix ${i + 1}!` })),
  { key: "fix-long", a: LONG, b: `${LONG}!` },
  { key: "keep-1", a: "keep 1!", b: "keep 1" },
  { key: "keep-2", a: "keep 2!", b: "keep 2" },
  // Markup in an answer is data: it must show as these characters.
  { key: "same-1", a: "<b>same 1</b>", b: "<b>same 1</b>" },
  { key: "same-2", a: "same 2", b: "same 2" },
  { key: "same-3", a: "same 3", b: "same 3" },
  { key: "same-4", a: "same 4", b: "same 4" },
];
const CSV = ["item_key,a,b", ...ROWS.map((r) => `${r.key},${r.a},${r.b}`)].join("\n");
const IMPROVED = 31;
const REGRESSED = 2;
const CHECKS = [{ name: "ends_with_bang", type: "regex", pattern: "!$" }];

let page: Page;
let thread: string;
let original: string;
let variant: string;

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });
const detailOf = (p: Page) => panelOf(p).getByTestId("batch-detail");
const rows = (p: Page) => p.getByTestId("pair-row");

async function batchStatus(p: Page, id: string): Promise<string> {
  const res = await p.request.get(`/api/threads/${thread}/subagent-batches/${id}`);
  expect(res.status()).toBe(200);
  return ((await res.json()) as { status: string }).status;
}

/** The table shows the filter's own rows (not the previous filter's, kept while the next loads). */
async function filterBy(p: Page, change: string) {
  await p.getByLabel("Change", { exact: true }).selectOption(change);
  const table = p.getByTestId("pair-table");
  await expect(table).toHaveAttribute("data-change", change);
  await expect(table).toHaveAttribute("data-ready", "true");
}

/** No page-level sideways scroll: the document and the page's scroll box are no wider than the window. */
async function expectNoSideScroll(p: Page) {
  const widths = await p.evaluate(() => {
    const box = document.querySelector("main > div > div.overflow-y-auto") as HTMLElement | null;
    return {
      doc: document.documentElement.scrollWidth,
      win: window.innerWidth,
      box: box ? box.scrollWidth - box.clientWidth : 0,
    };
  });
  expect(widths.doc).toBeLessThanOrEqual(widths.win);
  expect(widths.box).toBeLessThanOrEqual(0);
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "compare");
  thread = await createThreadViaApi(page, "Compare runs");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900: a batch with a check, made in the New batch dialog, runs in the worker", async () => {
  await page.goto(`/threads/${thread}`);
  await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByLabel("Prompt template").fill("[[echo]]{{a}}");
  await dialog.getByLabel("Items", { exact: true }).fill(CSV);
  // Pasted text is read as lines unless told (a file's .csv name would say so).
  await dialog.getByLabel("Format", { exact: true }).selectOption("csv");
  await expect(dialog.getByTestId("new-batch-count")).toContainText(`${ROWS.length} items`);
  await dialog.getByText("Output and checks").click();
  await dialog.getByLabel("Checks").fill(JSON.stringify(CHECKS));
  await expect(dialog.getByRole("alert")).toHaveCount(0);
  await dialog.getByRole("button", { name: "Start batch" }).click();
  await expect(dialog).toBeHidden();
  const detail = detailOf(page);
  original = (await detail.getAttribute("data-batch-id"))!;
  expect(original).toMatch(/^[0-9a-f-]{36}$/);
  await expect.poll(() => batchStatus(page, original), { timeout: 90_000 }).toBe("completed");
  await expect(detail).toHaveAttribute("data-status", "completed");
  // One batch: nothing to compare with yet.
  await expect(detail.getByRole("button", { name: "Compare with…" })).toBeDisabled();
});

test("1400×900: Run a variant… opens the dialog prefilled, its items the original's; a 400 shows under the template", async () => {
  const detail = detailOf(page);
  await detail.getByRole("button", { name: "Run a variant…" }).click();
  const dialog = page.getByRole("dialog", { name: "Run a variant" });
  await expect(dialog).toBeVisible();
  await expect(dialog).toHaveAttribute("data-variant-of", original);
  await expect(dialog.getByTestId("variant-items-line")).toContainText(`Same ${ROWS.length} items as [[echo]]{{a}}`);
  // The item list gives way to the original's items; the settings are the original's.
  await expect(dialog.getByRole("textbox", { name: "Items", exact: true })).toBeHidden();
  await expect(dialog.getByTestId("new-batch-count")).toHaveCount(0);
  const template = dialog.getByLabel("Prompt template", { exact: true });
  await expect(template).toHaveValue("[[echo]]{{a}}");
  await expect(dialog.getByLabel("Model", { exact: true })).toHaveValue("simulator");
  await expect(dialog.getByLabel("Checks", { exact: true })).toBeVisible();
  expect(JSON.parse(await dialog.getByLabel("Checks", { exact: true }).inputValue())).toEqual(CHECKS);
  // All 37 failed their check except the two "keep" items: the choice offers those 35 alone.
  await expect(dialog.getByLabel("Run", { exact: true })).toContainText("Only the 35 whose checks failed");
  await shot(page, "01-variant-dialog");

  // A template naming no field: the server's 400 is shown under the template, nothing is created.
  await template.fill("[[echo]] no field here");
  await dialog.getByRole("button", { name: "Start variant" }).click();
  await expect(template).toHaveAttribute("aria-invalid", "true");
  await expect(dialog.getByRole("alert")).toHaveText(/^prompt_template: /);
  await expect(dialog).toBeVisible();

  await template.fill("[[echo]]{{b}}");
  await expect(dialog.getByRole("alert")).toHaveCount(0);
  await dialog.getByRole("button", { name: "Start variant" }).click();
  await expect(dialog).toBeHidden();
  // The panel selects the new batch.
  await expect(detail).not.toHaveAttribute("data-batch-id", original);
  variant = (await detail.getAttribute("data-batch-id"))!;
  await expect.poll(() => batchStatus(page, variant), { timeout: 90_000 }).toBe("completed");
  const res = await page.request.get(`/api/threads/${thread}/subagent-batches/${variant}`);
  expect(((await res.json()) as { variant_of: string }).variant_of).toBe(original);
  // Named by title, the variant says what it re-runs: in the header, the batch list and its receipt.
  await expect(detail.getByTestId("batch-title")).toContainText("[[echo]]{{b}}");
  await expect(detail.getByTestId("batch-variant-of")).toHaveText("variant of [[echo]]{{a}}");
  const list = panelOf(page).getByRole("list", { name: "Batches on this thread" });
  await expect(list.getByTestId("batch-list-title")).toHaveText(["[[echo]]{{b}}", "[[echo]]{{a}}"]);
  await expect(list.getByTestId("batch-list-variant-of")).toHaveText(["variant of [[echo]]{{a}}"]);
  const receipt = page.locator(`[data-testid="batch-receipt"][data-batch-id="${variant}"]`);
  await expect(receipt.getByTestId("receipt-variant-of")).toHaveText("variant of [[echo]]{{a}}");
  await shot(page, "01b-variant-named");
});

test("1400×900: Compare with… lists the original and opens the comparison, original as A", async () => {
  const detail = detailOf(page);
  await expect(detail).toHaveAttribute("data-status", "completed");
  await detail.getByRole("button", { name: "Compare with…" }).click();
  const candidate = detail.getByTestId("compare-candidate");
  await expect(candidate).toHaveCount(1);
  await expect(candidate).toContainText("this batch's original");
  await shot(page, "02-compare-with");
  await candidate.click();
  await expect(page).toHaveURL(new RegExp(`/threads/${thread}/batches/${original}/compare/${variant}$`));

  await expect(page.getByTestId("compare-side-a-title")).toHaveText("[[echo]]{{a}}");
  await expect(page.getByTestId("compare-side-b-title")).toHaveText("[[echo]]{{b}}");
  // What changed from A to B: the template alone.
  const changed = page.getByTestId("compare-setting");
  await expect(changed).toHaveCount(1);
  await expect(changed).toHaveAttribute("data-setting", "prompt_template");
  await expect(changed.getByTestId("compare-setting-a")).toHaveText("[[echo]]{{a}}");
  await expect(changed.getByTestId("compare-setting-b")).toHaveText("[[echo]]{{b}}");
  await expect(page.getByTestId("compare-improved")).toHaveText(`${IMPROVED} improved`);
  await expect(page.getByTestId("compare-regressed")).toHaveText(`${REGRESSED} regressed`);
  // 31 against 2 is no accident.
  await expect(page.getByTestId("compare-p-words")).toHaveText(/^Clearly better \(p = < 0\.0001\): .*unlikely by chance\.$/);
  await expect(page.getByTestId("compare-pending")).toHaveCount(0);
  await expect(page.getByTestId("compare-figure-pass-rate")).toContainText("5.4%");
  await expect(page.getByTestId("compare-figure-pass-rate")).toContainText("84%");
  const check = page.locator('[data-testid="compare-check-row"][data-check="ends_with_bang"]');
  await expect(check.getByRole("cell")).toHaveText(["2 / 35", "31 / 6", String(IMPROVED), String(REGRESSED)]);
  await expect(page.getByRole("link", { name: /Back to Compare runs/ })).toHaveAttribute("href", `/threads/${thread}`);
  await expect(page.getByRole("link", { name: "compare.csv" })).toHaveAttribute("href", /\/compare\.csv\?change=changed$/);
  await expect(page.locator("main").getByRole("alert")).toHaveCount(0);
});

test("1400×900: the Change filter narrows the rows, Load more reads the next page, long outputs expand", async () => {
  const table = page.getByTestId("pair-table");
  // It opens on the changed items: 33 of them, 25 a page.
  await expect(table).toHaveAttribute("data-change", "changed");
  await expect(rows(page)).toHaveCount(25);
  await expect(page.getByTestId("pair-shown")).toHaveText("Showing 25");
  await shot(page, "03-desktop");
  await page.getByRole("button", { name: "Load more" }).click();
  await expect(rows(page)).toHaveCount(IMPROVED + REGRESSED);
  await expect(page.getByTestId("pair-end")).toBeVisible();
  await expect(page.getByRole("button", { name: "Load more" })).toHaveCount(0);

  await filterBy(page, "regressed");
  await expect(rows(page)).toHaveCount(2);
  await expect(rows(page).first()).toHaveAttribute("data-item-key", "keep-1");
  await expect(rows(page).first().getByTestId("pair-a")).toHaveAttribute("data-verdict", "passed");
  await expect(rows(page).first().getByTestId("pair-b")).toHaveAttribute("data-verdict", "failed");
  await expect(rows(page).first().getByTestId("pair-failed-checks")).toHaveText("failed: ends_with_bang");
  await expect(page.getByTestId("pair-shown")).toHaveText("Showing 2 of 2");
  await expect(page.getByRole("link", { name: "compare.csv" })).toHaveAttribute("href", /\?change=regressed$/);

  await filterBy(page, "same");
  await expect(rows(page)).toHaveCount(4);
  for (const r of await rows(page).all()) await expect(r).toHaveAttribute("data-change", "same");
  // An answer that looks like markup is shown as its characters.
  const markup = page.locator('[data-testid="pair-row"][data-item-key="same-1"]');
  await expect(markup.getByTestId("pair-a").getByTestId("pair-output")).toHaveText("<b>same 1</b>");
  await expect(markup.locator("b")).toHaveCount(0);

  await filterBy(page, "improved");
  await expect(rows(page)).toHaveCount(25);
  await expect(page.getByTestId("pair-shown")).toHaveText(`Showing 25 of ${IMPROVED}`);
  await page.getByRole("button", { name: "Load more" }).click();
  await expect(rows(page)).toHaveCount(IMPROVED);
  // The long answer is clipped, and "Show all" shows it whole.
  const long = page.locator('[data-testid="pair-row"][data-item-key="fix-long"]');
  const longB = long.getByTestId("pair-b").getByTestId("pair-output");
  await expect(longB).toHaveAttribute("data-clipped", "true");
  await long.getByTestId("pair-b").getByRole("button", { name: /^Show all/ }).click();
  await expect(longB).not.toHaveAttribute("data-clipped");
  await expect(longB).toHaveText(`${LONG}!`);

  await filterBy(page, "all");
  await expect(rows(page)).toHaveCount(25);
  await expect(page.getByTestId("pair-shown")).toHaveText(`Showing 25 of ${ROWS.length}`);
  await page.getByRole("button", { name: "Load more" }).click();
  await expect(rows(page)).toHaveCount(ROWS.length);
  await expect(page).toHaveURL(/\?change=all$/);
  await expectFits(page.getByTestId("compare-page"), DESKTOP.width);
  await expectNoSideScroll(page);
  await expect(page.locator("main").getByRole("alert")).toHaveCount(0);
  await shot(page, "04-desktop-all", true);
});

test("390×844: the comparison fits a phone: rows stack as cards, nothing past the window", async () => {
  await page.setViewportSize(PHONE);
  await page.reload();
  await expect(page.getByTestId("pair-table")).toHaveAttribute("data-change", "all");
  await expect(page.getByTestId("compare-improved")).toHaveText(`${IMPROVED} improved`);
  await expect(rows(page)).toHaveCount(25);
  await expectFits(page.getByTestId("compare-page"), PHONE.width);
  await expectNoSideScroll(page);
  await shot(page, "05-phone-top");
  await page.locator('[data-testid="pair-row"][data-item-key="fix-01"]').scrollIntoViewIfNeeded();
  await shot(page, "06-phone-rows");
  await filterBy(page, "regressed");
  await expect(rows(page)).toHaveCount(2);
  await expectFits(page.getByTestId("compare-page"), PHONE.width);
  await expect(page.locator("main").getByRole("alert")).toHaveCount(0);
  await page.setViewportSize(DESKTOP);
});

test("390×844: the batch menu in the drawer: Compare with… and Run a variant… stay on screen", async () => {
  await page.setViewportSize(PHONE);
  await page.goto(`/threads/${thread}`);
  await page.getByTestId("batches-drawer-toggle").click();
  const detail = detailOf(page);
  await expect(detail).toBeVisible();
  await detail.getByRole("button", { name: "Compare with…" }).click();
  await expect(detail.getByTestId("compare-candidate")).toHaveCount(1);
  await detail.getByTestId("compare-candidate").scrollIntoViewIfNeeded();
  // (The Results table below scrolls sideways in its own box, by design: the menu must not.)
  await expectFits(detail.getByTestId("batch-menu"), PHONE.width);
  await shot(page, "07-phone-menu");
  await detail.getByRole("button", { name: "Run a variant…" }).click();
  const dialog = page.getByRole("dialog", { name: "Run a variant" });
  await expect(dialog.getByTestId("variant-items-line")).toContainText(`Same ${ROWS.length} items as`);
  const box = await dialog.boundingBox();
  expect(box!.x).toBeGreaterThanOrEqual(0);
  expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
  await shot(page, "08-phone-variant-dialog");
  await dialog.getByRole("button", { name: "Close" }).click();
  await expect(dialog).toBeHidden();
  await page.setViewportSize(DESKTOP);
});
