import { mkdirSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { expectFits } from "./support/fit";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * Corrections as examples on the comparison page, in real Chromium against the production build,
 * a real worker and the simulator: a batch, then its variant with two of a golden set's answers as
 * examples (made through the API), compared. With `[[echo]]` the simulator answers the whole
 * prompt, so the variant's answers carry the examples before the item: its check ("mentions the
 * golden answer") passes where the original's fails, and "What changed from A to B" names the
 * examples (none on A; how many, from which set and version on B); at 1400×900 and 390×844 with
 * nothing past the window.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(SCREENSHOT_DIR, `compare-examples-${name}.png`) });

test.describe.configure({ mode: "serial" });

const DESKTOP = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

let page: Page;
let thread: string;
let original: string;
let variant: string;
let setId: string;

async function settled(id: string) {
  await expect
    .poll(
      async () => {
        const res = await page.request.get(`/api/threads/${thread}/subagent-batches/${id}`);
        return ((await res.json()) as { status: string }).status;
      },
      { timeout: 90_000 },
    )
    .toBe("completed");
}

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage({ viewport: DESKTOP });
  await signedInAccount(page, "compare-examples");
  thread = await createThreadViaApi(page, "Examples help");
  const set = await page.request.post("/api/golden-sets", {
    data: {
      name: "Ticket labels people fixed",
      items: [
        { item_key: "g1", input: "The screen flickers", expected: "golden: hardware" },
        { item_key: "g2", input: "I was charged twice", expected: "golden: billing" },
        { item_key: "g3", input: "The app crashes on start", expected: "golden: software" },
      ],
    },
  });
  expect(set.status(), await set.text()).toBe(201);
  setId = ((await set.json()) as { id: string }).id;
  const created = await page.request.post(`/api/threads/${thread}/subagent-batches`, {
    data: {
      submission_key: "examples-original",
      items: ["My keyboard is dead", "Refund my order", "Login page hangs"].map((text, i) => ({ item_key: `t${i + 1}`, text })),
      prompt_template: "[[echo]]{{text}}",
      checks: [{ name: "mentions_golden", type: "regex", pattern: "golden" }],
    },
  });
  expect(created.status(), await created.text()).toBe(201);
  original = ((await created.json()) as { id: string }).id;
  await settled(original);
  const made = await page.request.post(`/api/threads/${thread}/subagent-batches/${original}/variant`, {
    data: { submission_key: "examples-variant", examples: { golden_set: setId, count: 2 } },
  });
  expect(made.status(), await made.text()).toBe(201);
  variant = ((await made.json()) as { id: string }).id;
  await settled(variant);
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("1400×900: the comparison names the examples B ran with, and what they changed", async () => {
  await page.goto(`/threads/${thread}/batches/${original}/compare/${variant}`);
  const changed = page.getByTestId("compare-setting");
  await expect(changed).toHaveCount(1);
  await expect(changed).toHaveAttribute("data-setting", "examples");
  await expect(changed.getByRole("term")).toHaveText("Examples");
  await expect(changed.getByTestId("compare-setting-a")).toHaveText("none");
  await expect(changed.getByTestId("compare-setting-b")).toHaveText(`2 examples from golden set "Ticket labels people fixed" (${setId}), version 1`);
  await expect(page.getByTestId("compare-improved")).toHaveText("3 improved");
  await expect(page.getByTestId("compare-regressed")).toHaveText("0 regressed");
  await expectFits(page.getByTestId("compare-page"), DESKTOP.width);
  await expect(page.locator("main").getByRole("alert")).toHaveCount(0);
  await shot(page, "01-desktop");
});

test("390×844: the same on a phone, nothing past the window", async () => {
  await page.setViewportSize(PHONE);
  await page.reload();
  const changed = page.getByTestId("compare-setting");
  await expect(changed.getByTestId("compare-setting-b")).toContainText("2 examples from golden set");
  await expectFits(page.getByTestId("compare-page"), PHONE.width);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(width).toBeLessThanOrEqual(PHONE.width);
  await changed.scrollIntoViewIfNeeded();
  await shot(page, "02-phone");
});
