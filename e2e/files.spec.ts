import { mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { resultLineSchema } from "@/lib/api/batches";
import { fileUrl } from "@/lib/api/files";
import { createThreadViaApi, signedInAccount } from "./support/auth";
import { SCREENSHOT_DIR } from "./support/env";
import { startWorker, stopAllWorkers } from "./support/worker";

/**
 * The thread workspace in real Chromium against the production build and a real worker: attach
 * two files in the chat, see them in the Files section, run a batch over them from the New
 * batch dialog ("From files") whose items read their files and write artifacts, see the tool
 * calls in an item's detail and the artifacts in the batch detail and the Files section,
 * download one, drop a third on the chat, delete one.
 */

mkdirSync(SCREENSHOT_DIR, { recursive: true });
const shot = (page: Page, name: string) =>
  page.screenshot({ path: path.join(SCREENSHOT_DIR, `files-${name}.png`), fullPage: true });

const FILES = [
  { name: "alpha.md", mimeType: "text/markdown", buffer: Buffer.from("# Alpha\nThe alpha report says revenue grew.\n") },
  { name: "beta.txt", mimeType: "text/plain", buffer: Buffer.from("Beta notes: the pilot ended early.\n") },
];

test.describe.configure({ mode: "serial" });

let page: Page;
let threadId: string;

const filesOf = (p: Page) => p.getByRole("region", { name: "Files" });
const rowOf = (p: Page, filePath: string) => filesOf(p).locator(`[data-testid="file-row"][data-path="${filePath}"]`);

test.beforeAll(async ({ browser }) => {
  await startWorker();
  page = await browser.newPage();
  await signedInAccount(page, "files");
  threadId = await createThreadViaApi(page, "Workspace");
});

test.afterAll(async () => {
  await page?.close();
  await stopAllWorkers();
});

test("attach two files in the chat; they are listed in the Files section", async () => {
  await page.goto(`/threads/${threadId}`);
  const files = filesOf(page);
  await expect(files.getByText("No files yet.")).toBeVisible();
  const chooser = page.waitForEvent("filechooser");
  await page.getByRole("button", { name: "Attach files" }).click();
  await (await chooser).setFiles(FILES);
  await expect(page.getByTestId("upload-status")).toHaveText("Added 2 files to this thread's files.");
  await expect(files.getByTestId("file-row")).toHaveCount(2);
  await expect(files.getByTestId("files-count")).toHaveText(/^2 files · \d+ B$/);
  await expect(rowOf(page, "alpha.md")).toContainText("uploaded");
  await expect(rowOf(page, "beta.txt")).toContainText("35 B");
  await shot(page, "01-attached");
});

test("run a batch over the files from the New batch dialog; each item reads its file", async () => {
  const panel = page.getByRole("complementary", { name: "Batches" });
  await panel.getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByText("From files", { exact: true }).click();
  await expect(dialog.getByLabel("Prompt template")).toHaveValue("{{file}}");
  await dialog.getByLabel("Prompt template").fill('Summarize {{file}} [[tool:read_file {"path":"{{file}}"}]]');
  await expect(dialog.getByTestId("new-batch-files-count")).toHaveText("2 files of 2 match");
  // Narrow by glob, then widen again by ticking the other file.
  await dialog.getByLabel("Files (glob)").fill("*.md");
  await expect(dialog.getByTestId("new-batch-files-count")).toHaveText("1 file of 2 matches");
  await expect(dialog.getByRole("checkbox", { name: /beta\.txt/ })).not.toBeChecked();
  await dialog.getByRole("checkbox", { name: /beta\.txt/ }).check();
  await expect(dialog.getByLabel("Files (glob)")).toHaveValue("{alpha.md,beta.txt}");
  await expect(dialog.getByTestId("new-batch-files-count")).toHaveText("2 files of 2 match");
  await expect(dialog.getByTestId("new-batch-files-preview").first()).toHaveText(
    'Summarize alpha.md [[tool:read_file {"path":"alpha.md"}]]',
  );
  await dialog.getByLabel("Files (glob)").fill("*.csv");
  await expect(dialog.getByRole("alert")).toHaveText("No file of this thread matches the glob.");
  await expect(dialog.getByRole("button", { name: "Start batch" })).toBeDisabled();
  await dialog.getByLabel("Files (glob)").fill("**");
  // Each item also writes an artifact, which appears in the Files section with its run.
  await dialog
    .getByLabel("Prompt template")
    .fill(
      'Summarize {{file}} [[tool:read_file {"path":"{{file}}"}]] ' +
        '[[tool:write_file {"path":"summaries/{{file}}","content":"summary of {{file}}"}]]',
    );
  await shot(page, "02-dialog-from-files");
  await dialog.getByRole("button", { name: "Start batch" }).click();
  await expect(dialog).toHaveCount(0);

  const detail = panel.getByTestId("batch-detail");
  await expect(detail.getByTestId("count-total")).toHaveText("2");
  await expect(detail).toHaveAttribute("data-status", "completed", { timeout: 60_000 });
  await expect(detail.getByTestId("count-succeeded")).toHaveText("2");

  // The results say what each sub-agent read from its own file.
  const batchId = await detail.getAttribute("data-batch-id");
  const res = await page.request.get(`/api/threads/${threadId}/subagent-batches/${batchId}/results.jsonl`);
  const lines = (await res.text())
    .trim()
    .split("\n")
    .map((l) => resultLineSchema.parse(JSON.parse(l)));
  expect(lines.map((l) => l.item_key)).toEqual(["alpha.md", "beta.txt"]);
  expect(lines[0]!.result).toContain("The alpha report says revenue grew.");
  expect(lines[1]!.result).toContain("Beta notes: the pilot ended early.");
  const artifact = rowOf(page, "summaries/alpha.md");
  await expect(artifact).toContainText("written by run");
  await expect(rowOf(page, "alpha.md")).toContainText("uploaded");
  await expect(filesOf(page).getByTestId("file-row")).toHaveCount(4);

  // The batch detail lists the files its items wrote (never the uploads they read).
  const artifacts = detail.getByTestId("batch-artifacts");
  await expect(artifacts.getByTestId("artifact-row")).toHaveCount(2);
  await expect(artifacts.getByTestId("artifact-row").nth(0)).toHaveAttribute("data-path", "summaries/alpha.md");
  await expect(artifacts.getByTestId("artifact-row").nth(1)).toHaveAttribute("data-path", "summaries/beta.txt");
  // The item detail lists the calls its sub-agent made, in order.
  const item = panel.locator('[data-testid="item-row"][data-item-key="beta.txt"]');
  await item.getByRole("button", { name: "beta.txt" }).click();
  const itemDetail = panel.getByTestId("item-detail");
  await expect(itemDetail).toContainText("2 tool calls");
  const calls = itemDetail.getByTestId("tool-call");
  await expect(calls).toHaveCount(2);
  await expect(calls.nth(0)).toHaveAttribute("data-tool", "read_file");
  await expect(calls.nth(1)).toHaveAttribute("data-tool", "write_file");
  await expect(calls.nth(1)).toHaveAttribute("data-status", "ok");
  await calls.nth(0).locator("summary").click();
  await expect(calls.nth(0)).toContainText('{"path":"beta.txt"}');
  await shot(page, "03-batch-done");
});

test("download a file: the exact bytes as an attachment, from the Files section and the batch's artifacts", async () => {
  const download = page.waitForEvent("download");
  await rowOf(page, "alpha.md").getByRole("link", { name: "Download alpha.md" }).click();
  const file = await download;
  expect(file.suggestedFilename()).toBe("alpha.md");
  expect(readFileSync((await file.path())!)).toEqual(FILES[0]!.buffer);
  const artifactDownload = page.waitForEvent("download");
  await page.getByTestId("batch-artifacts").getByRole("link", { name: "Download summaries/beta.txt" }).click();
  const artifact = await artifactDownload;
  expect(artifact.suggestedFilename()).toBe("beta.txt");
  expect(readFileSync((await artifact.path())!, "utf8")).toBe("summary of beta.txt");
});

test("drop a file on the chat; delete one after confirming", async () => {
  // Dropped on the composer; the drop target is the whole chat, which the events bubble up to.
  const target = page.getByRole("region", { name: "Chat" }).getByLabel("Message");
  const transfer = await page.evaluateHandle(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(["dropped bytes"], "dropped é.txt", { type: "text/plain" }));
    return dt;
  });
  await target.dispatchEvent("dragenter", { dataTransfer: transfer });
  await expect(page.getByTestId("drop-overlay")).toBeVisible();
  await target.dispatchEvent("drop", { dataTransfer: transfer });
  await expect(page.getByTestId("drop-overlay")).toHaveCount(0);
  await expect(rowOf(page, "dropped é.txt")).toBeVisible();
  // A non-ASCII name survives the URL (each segment encoded) and comes back as RFC 6266 filename*.
  const dropped = await page.request.get(fileUrl(threadId, "dropped é.txt"));
  expect(await dropped.text()).toBe("dropped bytes");
  expect(dropped.headers()["content-disposition"]).toBe(`attachment; filename="dropped _.txt"; filename*=UTF-8''dropped%20%C3%A9.txt`);

  const row = rowOf(page, "beta.txt");
  await row.getByRole("button", { name: "Delete beta.txt" }).click();
  await expect(row.getByRole("button", { name: "Keep" })).toBeFocused();
  await row.getByRole("button", { name: "Keep" }).click();
  await expect(row).toBeVisible();
  await row.getByRole("button", { name: "Delete beta.txt" }).click();
  await row.getByRole("button", { name: "Delete", exact: true }).click();
  await expect(row).toHaveCount(0);
  await expect(filesOf(page).getByTestId("file-row")).toHaveCount(4);
  const listed = await page.request.get(`/api/threads/${threadId}/files`);
  expect(((await listed.json()) as { files: { path: string }[] }).files.map((f) => f.path)).toEqual([
    "alpha.md",
    "dropped é.txt",
    "summaries/alpha.md",
    "summaries/beta.txt",
  ]);
  await shot(page, "04-after-delete");
});

test("screenshots at 390x844", async () => {
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`/threads/${threadId}`);
  // On a phone the batch panel and the Files section live in a drawer opened from the header.
  await page.getByTestId("batches-drawer-toggle").click();
  await expect(filesOf(page).getByTestId("file-row")).toHaveCount(4);
  await expect(filesOf(page)).toBeVisible();
  await shot(page, "05-mobile");
  const artifacts = page.getByTestId("batch-artifacts");
  await expect(artifacts.getByTestId("artifact-row")).toHaveCount(2);
  await artifacts.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "files-05b-mobile-artifacts.png") });
  await filesOf(page).scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "files-06-mobile-files.png") });
  await page.getByRole("complementary", { name: "Batches" }).getByRole("button", { name: "New batch", exact: true }).click();
  const dialog = page.getByRole("dialog", { name: "New batch" });
  await dialog.getByText("From files", { exact: true }).click();
  await expect(dialog.getByTestId("new-batch-files-count")).toHaveText("4 files of 4 match");
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, "files-07-mobile-dialog.png") });
  await page.keyboard.press("Escape");
  await page.setViewportSize({ width: 1400, height: 900 });
});
