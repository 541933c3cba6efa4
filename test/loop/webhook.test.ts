import { batchSubagent } from "@/server/agent/registry";
import { createHmac, timingSafeEqual } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cancelBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { deliverDueWebhooks } from "@/server/batches/webhooks";
import { errorOf, makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { SIM_MODEL, sleep, testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { call, waitUntil } from "./support";

/**
 * Webhooks: the settings API (https only, loopback http only when tools.web_allow_hosts lists
 * it, the secret shown once), and real deliveries to a local receiver that verifies the
 * HMAC-SHA256 signature over the raw body, answers 500 first and 200 on the retry.
 */

process.env.FLOTILLA__TOOLS__WEB_ALLOW_HOSTS = JSON.stringify(["127.0.0.1"]);

let t: TestDatabase;
let user: TestUser;
let receiver: http.Server;
let port: number;
const received: { body: string; signature: string | undefined; status: number }[] = [];
let failFirst = 1;

beforeAll(async () => {
  t = await setupApiDatabase();
  user = await makeUser(t, "hook");
  receiver = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => {
      body += String(c);
    });
    req.on("end", () => {
      const status = failFirst-- > 0 ? 500 : 200;
      received.push({ body, signature: req.headers["x-flotilla-signature"] as string | undefined, status });
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  port = (receiver.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise((resolve) => receiver.close(resolve));
});

function verify(secret: string, body: string, header: string | undefined): boolean {
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(body).digest("hex")}`);
  const got = Buffer.from(header ?? "");
  return got.length === expected.length && timingSafeEqual(got, expected);
}

describe("webhook settings", () => {
  it("accepts https and allowed loopback http, refuses the rest naming url, and shows the secret once", async () => {
    for (const url of ["http://example.com/hook", "ftp://127.0.0.1/x", "http://localhost:9/x", "not a url", "https://u:p@example.com/"]) {
      const r = await call("PUT", "/api/webhook", { token: user.token, json: { url } });
      expect(r.status, url).toBe(400);
      expect((await errorOf(r)).message).toMatch(/^url: /);
    }
    const missing = await call("PUT", "/api/webhook", { token: user.token, json: {} });
    expect((await errorOf(missing)).message).toMatch(/^url: /);
    expect(await (await call("GET", "/api/webhook", { token: user.token })).json()).toEqual({ webhook: null });

    const https = await call("PUT", "/api/webhook", { token: user.token, json: { url: "https://hooks.example.com/flotilla" } });
    expect(https.status).toBe(200);
    const { webhook } = (await https.json()) as { webhook: { url: string; secret: string } };
    expect(webhook.secret).toMatch(/^whsec_/);
    const read = (await (await call("GET", "/api/webhook", { token: user.token })).json()) as { webhook: Record<string, unknown> };
    expect(read.webhook.url).toBe("https://hooks.example.com/flotilla");
    expect(read.webhook).not.toHaveProperty("secret");
    expect((await call("GET", "/api/webhook")).status).toBe(401);

    expect((await call("DELETE", "/api/webhook", { token: user.token })).status).toBe(200);
    expect(await (await call("GET", "/api/webhook", { token: user.token })).json()).toEqual({ webhook: null });
  });
});

describe("webhook deliveries", () => {
  it("POSTs a signed body on settlement, retries after a 500, and records the delivery", async () => {
    const put = await call("PUT", "/api/webhook", { token: user.token, json: { url: `http://127.0.0.1:${port}/hook` } });
    expect(put.status).toBe(200);
    const { secret } = ((await put.json()) as { webhook: { secret: string } }).webhook;

    const threadId = await makeThread(t, user);
    const { batch } = await submitBatch(t.db, { ...batchSubagent(testConfig(), undefined),
      userId: user.userId,
      threadId,
      input: { submission_key: "hooked", items: ["a", "b"] },
      config: testConfig(),
      model: SIM_MODEL,
    });
    await cancelBatch(t.db, { userId: user.userId, threadId, batchId: batch.id });
    const [row] = await t.db.execute<{ status: string }>(sql`select status from webhook_deliveries where batch_id = ${batch.id}`);
    expect(row!.status).toBe("pending");

    // Two racing deliverers: one POST per due attempt, never two.
    await Promise.all([
      deliverDueWebhooks(t.db, { owner: "web-a", backoffBaseMs: 200 }),
      deliverDueWebhooks(t.db, { owner: "web-b", backoffBaseMs: 200 }),
    ]);
    expect(received).toHaveLength(1);
    expect(received[0]!.status).toBe(500);
    const [afterFail] = await t.db.execute<{ status: string; attempts: number; last_status_code: number; last_error: string }>(
      sql`select status, attempts, last_status_code, last_error from webhook_deliveries where batch_id = ${batch.id}`,
    );
    expect(afterFail).toMatchObject({ status: "pending", attempts: 1, last_status_code: 500, last_error: "receiver answered HTTP 500" });
    // Not due before its backoff.
    expect(await deliverDueWebhooks(t.db, { owner: "web-a" })).toBe(0);
    await sleep(250);
    await waitUntil("retry", async () => ((await deliverDueWebhooks(t.db, { owner: "web-a" })) > 0 ? true : undefined), 5_000, 50);
    expect(received).toHaveLength(2);
    expect(received[1]!.status).toBe(200);

    for (const r of received) expect(verify(secret, r.body, r.signature)).toBe(true);
    expect(verify("whsec_wrong", received[1]!.body, received[1]!.signature)).toBe(false);
    const payload = JSON.parse(received[1]!.body);
    expect(payload).toMatchObject({
      event: "batch.settled",
      batch_id: batch.id,
      thread_id: threadId,
      status: "cancelled",
      settlement_seq: 1,
      total: 2,
      counts: { succeeded: 0, failed: 0, cancelled: 2 },
    });
    const [done] = await t.db.execute<{ status: string; attempts: number; delivered_at: Date | null }>(
      sql`select status, attempts, delivered_at from webhook_deliveries where batch_id = ${batch.id}`,
    );
    expect(done).toMatchObject({ status: "delivered", attempts: 2 });
    expect(done!.delivered_at).not.toBeNull();
    expect(await deliverDueWebhooks(t.db, { owner: "web-a" })).toBe(0);
  });
});
