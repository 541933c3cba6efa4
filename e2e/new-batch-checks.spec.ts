import { expect, type Page, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The New batch dialog checks the typed fields before Start, in real Chromium against the
 * production build (whose CSP forbids eval): an output schema that does not compile and a regex
 * check RE2 does not compile (lookahead, which a JavaScript RegExp would take) are named inline
 * by their field and hold Start back; fixed, Start is offered. At 1400×900 and 390×844.
 */

const SIZES = [
  { name: "desktop", viewport: { width: 1400, height: 900 } },
  { name: "phone", viewport: { width: 390, height: 844 } },
] as const;

const SCHEMA = { type: "object", properties: { label: { type: "string", enum: ["hardware", "software"] } }, required: ["label"] };
const CHECK = { name: "label_word", type: "regex", pattern: "^(hardware|software)$", path: "/label" };

const panelOf = (p: Page) => p.getByRole("complementary", { name: "Batches" });

// The panel offers New batch while a worker is alive.
test.beforeAll(async () => {
  await startWorker();
});
test.afterAll(async () => {
  await stopAllWorkers();
});

for (const size of SIZES) {
  test(`${size.viewport.width}×${size.viewport.height}: a schema Ajv refuses and a pattern RE2 refuses are named before Start`, async ({
    browser,
  }) => {
    const page = await browser.newPage({ viewport: size.viewport });
    await signedInAccount(page, `checks-${size.name}`);
    const thread = await createThreadViaApi(page, `Checks ${size.name}`);
    await page.goto(`/threads/${thread}`);
    if (size.name === "phone") await page.getByTestId("batches-drawer-toggle").click();
    await panelOf(page).getByRole("button", { name: "New batch", exact: true }).click();
    const dialog = page.getByRole("dialog", { name: "New batch" });
    const start = dialog.getByRole("button", { name: "Start batch" });
    await dialog.getByLabel("Prompt template").fill("Label this ticket: {{item}}");
    await dialog.getByLabel("Items", { exact: true }).fill("the printer is jammed\nthe app crashes");
    await expect(dialog.getByTestId("new-batch-count")).toContainText("2 items");
    await expect(start).toBeEnabled();

    await dialog.getByText("Output and checks").click();
    const schema = dialog.getByLabel("Output schema");
    const checks = dialog.getByLabel("Checks");
    await schema.fill('{"type": "nope"}');
    await expect(dialog.getByRole("alert")).toHaveText("Output schema type: must be equal to one of the allowed values");
    await expect(schema).toHaveAttribute("aria-invalid", "true");
    await expect(start).toBeDisabled();
    await schema.fill('{"type": "object", "properties": {"label": {"$ref": "#/$defs/missing"}}}');
    await expect(dialog.getByRole("alert")).toHaveText("Output schema properties.label: can't resolve reference #/$defs/missing");
    await expect(start).toBeDisabled();
    await schema.fill(JSON.stringify(SCHEMA));
    await expect(dialog.getByRole("alert")).toHaveCount(0);
    await expect(start).toBeEnabled();

    await checks.fill(JSON.stringify([CHECK, { name: "no_lookahead", type: "regex", pattern: "(?=a)b" }]));
    await expect(dialog.getByRole("alert")).toHaveText(/^Check 2 pattern: does not compile \(RE2 syntax\): /);
    await expect(checks).toHaveAttribute("aria-invalid", "true");
    await expect(start).toBeDisabled();
    // Both at once, each under its own field.
    await schema.fill('{"type": "string", "pattern": "x{101}"}');
    await expect(dialog.getByRole("alert")).toHaveCount(2);
    await expect(dialog.getByRole("alert").first()).toHaveText("Output schema pattern: counted repetition {101} is above the limit of 100");
    await schema.fill(JSON.stringify(SCHEMA));
    await checks.fill(JSON.stringify([CHECK]));
    await expect(dialog.getByRole("alert")).toHaveCount(0);
    await expect(start).toBeEnabled();
    await page.close();
  });
}
