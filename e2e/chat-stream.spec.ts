import { expect, test } from "@playwright/test";
import { createThreadViaApi, signedInAccount } from "./support/auth";

/**
 * The chat stream reaches the browser uncompressed: Next gzips what a client accepts gzipped, and
 * a deflate flush per stream chunk cost the web process CPU on the first token's path (issue 44).
 * The thread list beside it shows compression is on for everything else.
 */
test("the chat stream and its resume are never gzipped, other JSON is", async ({ page }) => {
  await signedInAccount(page, "stream");
  const threadId = await createThreadViaApi(page);
  for (let i = 0; i < 30; i++) await createThreadViaApi(page, `A thread with a title long enough to make the list worth compressing ${i}`);
  const gzip = { "accept-encoding": "gzip, deflate, br" };

  const list = await page.request.get("/api/threads", { headers: gzip });
  expect(list.status()).toBe(200);
  expect(list.headers()["content-encoding"]).toBe("gzip");

  const chat = await page.request.post(`/api/threads/${threadId}/chat`, {
    headers: gzip,
    data: { message: { id: "m-stream-1", role: "user", parts: [{ type: "text", text: "Say hello in one short sentence." }] } },
  });
  expect(chat.status()).toBe(200);
  expect(chat.headers()["content-encoding"]).toBeUndefined();
  expect(chat.headers()["cache-control"]).toContain("no-transform");
  expect(await chat.text()).toContain('"type":"text-delta"');
});
