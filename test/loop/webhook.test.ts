import { batchSubagent } from "@/server/agent/registry";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { sql } from "drizzle-orm";
import { Webhook } from "standardwebhooks";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { webhookEventSchema } from "@/lib/api/batches";
import { cancelBatch, pauseBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { deliverDueWebhooks } from "@/server/batches/webhooks";
import { errorOf, makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { SIM_MODEL, sleep, testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { call, getProjection, waitUntil, Workers } from "./support";

/**
 * Webhooks: the settings API (https to a public address; plain http or a private address only
 * for a host or host:port in webhooks.allow_hosts; the secret shown once), and real deliveries
 * to a local receiver that verifies every one with the `standardwebhooks` package: the body and
 * type for each batch event, retries, a replay refused by the package's tolerance, refused
 * addresses recorded without any request reaching a listener, and a pre-Standard secret that
 * keeps working until it is replaced.
 */

type Received = { path: string; headers: http.IncomingHttpHeaders; body: string };

/** A real HTTP listener on loopback that records every request and answers `answer(path)`. */
async function listener(answer: (path: string) => number = () => 200): Promise<{ server: http.Server; port: number; got: Received[] }> {
  const got: Received[] = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => {
      body += String(c);
    });
    req.on("end", () => {
      got.push({ path: req.url ?? "", headers: req.headers, body });
      res.writeHead(answer(req.url ?? "")).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port, got };
}

let failNext = 0;
const receiver = await listener(() => (failNext-- > 0 ? 500 : 200));
// Nothing may ever reach this one: every URL naming it is refused.
const trap = await listener();
// The route handlers read the process configuration once: only the receiver's host:port is allowed.
process.env.FLOTILLA__WEBHOOKS__ALLOW_HOSTS = JSON.stringify([`127.0.0.1:${receiver.port}`]);
const config = testConfig({ webhooks: { allow_hosts: [`127.0.0.1:${receiver.port}`] } });
const noneAllowed = testConfig();
const hookUrl = `http://127.0.0.1:${receiver.port}/hook`;

const workers = new Workers();
let t: TestDatabase;
let user: TestUser;

beforeAll(async () => {
  t = await setupApiDatabase();
  workers.use(t);
  user = await makeUser(t, "hook");
});

afterEach(async () => {
  await workers.stopAll();
  vi.useRealTimers();
});

afterAll(async () => {
  await Promise.all([receiver, trap].map((l) => new Promise((resolve) => l.server.close(resolve))));
});

async function saveWebhook(who: TestUser, url: string): Promise<string> {
  const put = await call("PUT", "/api/webhook", { token: who.token, json: { url } });
  expect(put.status, await put.clone().text()).toBe(200);
  return ((await put.json()) as { webhook: { secret: string } }).webhook.secret;
}

async function newBatch(who: TestUser, items: string[], key: string) {
  const threadId = await makeThread(t, who);
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(config, undefined),
    userId: who.userId,
    threadId,
    input: { submission_key: key, items },
    config,
    model: SIM_MODEL,
  });
  return { threadId, batchId: batch.id };
}

async function deliveries(batchId: string) {
  return t.db.execute<{ type: string; status: string; attempts: number; last_status_code: number | null; last_error: string | null }>(
    sql`select type, status, attempts, last_status_code, last_error from webhook_deliveries where batch_id = ${batchId} order by id`,
  );
}

/** Delivers everything due until `batchId` has no pending delivery left. */
async function deliverAll(batchId: string, cfg = config) {
  await waitUntil(
    "deliveries done",
    async () => {
      await deliverDueWebhooks(t.db, { owner: "in-test", config: cfg, backoffBaseMs: 50 });
      return (await deliveries(batchId)).some((d) => d.status === "pending") ? undefined : true;
    },
    10_000,
    50,
  );
}

const forBatch = (batchId: string) => receiver.got.filter((r) => r.body.includes(batchId));

describe("webhook settings", () => {
  it("refuses plain http, credentials and non-URLs naming url, shows the secret once, and keeps it out of GET", async () => {
    for (const url of ["http://example.com/hook", "ftp://127.0.0.1/x", "not a url", "https://u:p@example.com/"]) {
      const r = await call("PUT", "/api/webhook", { token: user.token, json: { url } });
      expect(r.status, url).toBe(400);
      expect((await errorOf(r)).message, url).toMatch(/^url: /);
    }
    const missing = await call("PUT", "/api/webhook", { token: user.token, json: {} });
    expect((await errorOf(missing)).message).toMatch(/^url: /);
    expect(await (await call("GET", "/api/webhook", { token: user.token })).json()).toEqual({ webhook: null });

    // A public address literal needs no DNS.
    const https = await call("PUT", "/api/webhook", { token: user.token, json: { url: "https://93.184.215.14/flotilla" } });
    expect(https.status).toBe(200);
    const { webhook } = (await https.json()) as { webhook: { url: string; secret: string; legacy_secret: boolean } };
    expect(webhook.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(webhook.legacy_secret).toBe(false);
    expect(() => new Webhook(webhook.secret)).not.toThrow();
    const read = (await (await call("GET", "/api/webhook", { token: user.token })).json()) as { webhook: Record<string, unknown> };
    expect(read.webhook.url).toBe("https://93.184.215.14/flotilla");
    expect(read.webhook).not.toHaveProperty("secret");
    expect((await call("GET", "/api/webhook")).status).toBe(401);

    expect((await call("DELETE", "/api/webhook", { token: user.token })).status).toBe(200);
    expect(await (await call("GET", "/api/webhook", { token: user.token })).json()).toEqual({ webhook: null });
  });

  it("refuses loopback, private, link-local, CGNAT, metadata and unique-local addresses and names resolving to them (400 naming url)", async () => {
    const port = trap.port;
    const refused = [
      `https://127.0.0.1:${port}/x`,
      `https://127.1:${port}/x`,
      `https://2130706433:${port}/x`,
      `https://localhost:${port}/x`,
      `https://0.0.0.0:${port}/x`,
      "https://10.1.2.3/x",
      "https://172.16.0.1/x",
      "https://192.168.1.1/x",
      "https://100.64.0.1/x",
      "https://169.254.169.254/latest/meta-data/",
      `https://[::1]:${port}/x`,
      `https://[::ffff:127.0.0.1]:${port}/x`,
      "https://[::ffff:a9fe:a9fe]/x",
      "https://[fe80::1]/x",
      "https://[fc00::1]/x",
      "https://[fd12:3456::1]/x",
      "https://[::]/x",
      // IPv6 forms carrying a refused IPv4 address: IPv4-compatible, NAT64, 6to4.
      `https://[::127.0.0.1]:${port}/x`,
      "https://[64:ff9b::169.254.169.254]/x",
      "https://[2002:a00:1::]/x",
      // Plain http only to the listed host:port: another port of that host, or another name for it, is refused.
      `http://127.0.0.1:${port}/x`,
      `http://localhost:${receiver.port}/x`,
    ];
    for (const url of refused) {
      const r = await call("PUT", "/api/webhook", { token: user.token, json: { url } });
      expect(r.status, url).toBe(400);
      expect((await errorOf(r)).message, url).toMatch(/^url: /);
    }
    expect(await (await call("GET", "/api/webhook", { token: user.token })).json()).toEqual({ webhook: null });
    expect(trap.got).toHaveLength(0);
    // The listed host:port itself is accepted over plain http.
    await saveWebhook(user, hookUrl);
    expect((await call("DELETE", "/api/webhook", { token: user.token })).status).toBe(200);
  });
});

describe("webhook deliveries", () => {
  it("signs every delivery per Standard Webhooks, retries after a 500 under the same webhook-id, and records the delivery", async () => {
    const secret = await saveWebhook(user, hookUrl);
    const { threadId, batchId } = await newBatch(user, ["a", "b"], "hooked");
    await cancelBatch(t.db, { userId: user.userId, threadId, batchId });
    expect((await deliveries(batchId)).map((d) => [d.type, d.status])).toEqual([["batch.cancelled", "pending"]]);

    failNext = 1;
    // Two racing deliverers: one POST per due attempt, never two.
    await Promise.all([
      deliverDueWebhooks(t.db, { owner: "web-a", config, backoffBaseMs: 200 }),
      deliverDueWebhooks(t.db, { owner: "web-b", config, backoffBaseMs: 200 }),
    ]);
    expect(forBatch(batchId)).toHaveLength(1);
    expect((await deliveries(batchId))[0]).toMatchObject({ status: "pending", attempts: 1, last_status_code: 500, last_error: "receiver answered HTTP 500" });
    // Not due before its backoff.
    expect(await deliverDueWebhooks(t.db, { owner: "web-a", config })).toBe(0);
    await sleep(1_100); // a new second: the retry's timestamp (and so its signature) differs
    await deliverAll(batchId);
    const got = forBatch(batchId);
    expect(got).toHaveLength(2);

    const wh = new Webhook(secret);
    for (const r of got) {
      expect(wh.verify(r.body, r.headers as Record<string, string>)).toEqual(JSON.parse(r.body));
      expect(r.headers["x-flotilla-signature"]).toBeUndefined();
      expect(r.headers["content-type"]).toBe("application/json");
    }
    expect(got[0]!.headers["webhook-id"]).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(got[1]!.headers["webhook-id"]).toBe(got[0]!.headers["webhook-id"]);
    expect(got[1]!.headers["webhook-signature"]).not.toBe(got[0]!.headers["webhook-signature"]);
    expect(() => new Webhook(`whsec_${Buffer.from("another key of 32 bytes, please!").toString("base64")}`).verify(got[1]!.body, got[1]!.headers as Record<string, string>)).toThrow(/No matching signature/);

    const payload = webhookEventSchema.parse(JSON.parse(got[1]!.body));
    expect(payload).toMatchObject({
      type: "batch.cancelled",
      data: { id: batchId, thread_id: threadId, status: "cancelled", counts: { total: 2, succeeded: 0, failed: 0, cancelled: 2 }, usage: { input_tokens: 0, output_tokens: 0, cached_input_tokens: 0, cache_write_tokens: 0 }, cost_usd: 0 },
    });
    expect(Date.parse(payload.timestamp)).toBeGreaterThan(Date.now() - 60_000);
    expect((await deliveries(batchId))[0]).toMatchObject({ status: "delivered", attempts: 2 });
  });

  it("refuses a replayed delivery: an old timestamp fails the package's tolerance, a fresh one breaks the signature", async () => {
    const secret = await saveWebhook(user, hookUrl);
    const { threadId, batchId } = await newBatch(user, ["r"], "replayed");
    await cancelBatch(t.db, { userId: user.userId, threadId, batchId });
    await deliverAll(batchId);
    const [captured] = forBatch(batchId);
    const headers = captured!.headers as Record<string, string>;
    const wh = new Webhook(secret);
    expect(wh.verify(captured!.body, headers)).toBeTruthy();
    // The same bytes sent again six minutes later.
    vi.useFakeTimers({ toFake: ["Date"], now: Date.now() + 6 * 60_000 });
    expect(() => wh.verify(captured!.body, headers)).toThrow(/timestamp too old/);
    // A replayer who refreshes the timestamp no longer matches the signature.
    const fresh = { ...headers, "webhook-timestamp": String(Math.floor(Date.now() / 1000)) };
    expect(() => wh.verify(captured!.body, fresh)).toThrow(/No matching signature/);
    vi.useRealTimers();
    // Nor does another body under the captured headers.
    expect(() => wh.verify(captured!.body.replace("cancelled", "completed"), headers)).toThrow(/No matching signature/);
  });

  it("sends batch.completed, batch.failed, batch.paused and batch.cancelled with the batch's counts, usage and cost", async () => {
    const secret = await saveWebhook(user, hookUrl);
    workers.spawn({ FLOTILLA__SUBAGENT_RUNTIME__MAX_RUNNING: "4" });
    await workers.waitAlive(1);
    const done = await newBatch(user, ["one", "two", "three [[fail]]"], "completes");
    const failed = await newBatch(user, ["only [[fail]]"], "fails");
    for (const b of [done, failed])
      await waitUntil("settled", async () => {
        const p = await getProjection(user.token, b.threadId, b.batchId);
        return ["completed", "failed"].includes(p.status) ? p : undefined;
      });
    await workers.stopAll();
    const paused = await newBatch(user, ["p1", "p2"], "pauses");
    await pauseBatch(t.db, { userId: user.userId, threadId: paused.threadId, batchId: paused.batchId });
    await cancelBatch(t.db, { userId: user.userId, threadId: paused.threadId, batchId: paused.batchId });
    for (const b of [done, failed, paused]) await deliverAll(b.batchId);

    const wh = new Webhook(secret);
    const events = (batchId: string) =>
      forBatch(batchId).map((r) => webhookEventSchema.parse(wh.verify(r.body, r.headers as Record<string, string>)));
    const [completed] = events(done.batchId);
    expect(completed).toMatchObject({
      type: "batch.completed",
      data: { id: done.batchId, thread_id: done.threadId, status: "completed", counts: { total: 3, succeeded: 2, failed: 1, cancelled: 0 } },
    });
    expect(completed!.data.usage.input_tokens).toBeGreaterThan(0);
    expect(completed!.data.usage.output_tokens).toBeGreaterThan(0);
    expect(completed!.data.cost_usd).toBeGreaterThanOrEqual(0);
    expect(events(failed.batchId)).toMatchObject([
      { type: "batch.failed", data: { id: failed.batchId, status: "failed", counts: { total: 1, succeeded: 0, failed: 1, cancelled: 0 } } },
    ]);
    expect(events(paused.batchId)).toMatchObject([
      { type: "batch.paused", data: { id: paused.batchId, status: "paused", counts: { total: 2, succeeded: 0, failed: 0, cancelled: 0 } } },
      { type: "batch.cancelled", data: { id: paused.batchId, status: "cancelled", counts: { total: 2, cancelled: 2 } } },
    ]);
    expect(new Set(forBatch(paused.batchId).map((r) => r.headers["webhook-id"])).size).toBe(2);
  }, 120_000);

  it("refuses a stored URL at delivery when it reaches a refused address: recorded as refused, no request made", async () => {
    await saveWebhook(user, hookUrl);
    for (const url of [`http://127.0.0.1:${trap.port}/x`, `https://localhost:${trap.port}/x`, `https://[::ffff:127.0.0.1]:${trap.port}/x`]) {
      // As a row saved before this check existed, or under an allow list since shortened.
      await t.db.execute(sql`update user_webhooks set url = ${url} where user_id = ${user.userId}`);
      const { threadId, batchId } = await newBatch(user, ["x"], `refused ${url}`);
      await cancelBatch(t.db, { userId: user.userId, threadId, batchId });
      await deliverAll(batchId);
      const [row] = await deliveries(batchId);
      expect(row, url).toMatchObject({ status: "refused", attempts: 1, last_status_code: null });
      expect(row!.last_error, url).toMatch(/^refused: /);
    }
    // Allowed when saved, the receiver's port is refused once the allow list no longer names it.
    await t.db.execute(sql`update user_webhooks set url = ${hookUrl} where user_id = ${user.userId}`);
    const { threadId, batchId } = await newBatch(user, ["y"], "allow list shortened");
    await cancelBatch(t.db, { userId: user.userId, threadId, batchId });
    await deliverAll(batchId, noneAllowed);
    expect((await deliveries(batchId))[0]).toMatchObject({ status: "refused", attempts: 1 });
    expect(forBatch(batchId)).toHaveLength(0);
    expect(trap.got).toHaveLength(0);
  });

  it("keeps a secret issued before Standard Webhooks working (old header too) until a new secret is taken", async () => {
    await saveWebhook(user, hookUrl);
    const legacy = "whsec_Zm9vYmFy-_legacyBase64urlSecret0";
    await t.db.execute(sql`update user_webhooks set secret = ${legacy}, signing = 'legacy' where user_id = ${user.userId}`);
    const shown = (await (await call("GET", "/api/webhook", { token: user.token })).json()) as { webhook: { legacy_secret: boolean } };
    expect(shown.webhook.legacy_secret).toBe(true);
    const first = await newBatch(user, ["x"], "legacy");
    await cancelBatch(t.db, { userId: user.userId, threadId: first.threadId, batchId: first.batchId });
    await deliverAll(first.batchId);
    const [old] = forBatch(first.batchId);
    expect(new Webhook(legacy, { format: "raw" }).verify(old!.body, old!.headers as Record<string, string>)).toBeTruthy();
    const { createHmac } = await import("node:crypto");
    expect(old!.headers["x-flotilla-signature"]).toBe(`sha256=${createHmac("sha256", legacy).update(old!.body).digest("hex")}`);

    // Taking a new secret (same URL) ends the old header.
    const secret = await saveWebhook(user, hookUrl);
    const second = await newBatch(user, ["x"], "rekeyed");
    await cancelBatch(t.db, { userId: user.userId, threadId: second.threadId, batchId: second.batchId });
    await deliverAll(second.batchId);
    const [fresh] = forBatch(second.batchId);
    expect(new Webhook(secret).verify(fresh!.body, fresh!.headers as Record<string, string>)).toBeTruthy();
    expect(fresh!.headers["x-flotilla-signature"]).toBeUndefined();
  });
});
