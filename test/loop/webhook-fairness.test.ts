import { batchSubagent } from "@/server/agent/registry";
import { randomUUID } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { LanguageModelV3 } from "@ai-sdk/provider";
import { sql } from "drizzle-orm";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cancelBatch } from "@/server/batches/repository";
import { submitBatch } from "@/server/batches/submit";
import { setWebhook, WEBHOOK_PER_USER_LIMIT } from "@/server/batches/webhooks";
import { startSettlementRunner } from "@/server/chat/wakeup";
import { resolveModel } from "@/server/models/index";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { SIM_MODEL, sleep, testConfig } from "../batches/support";
import type { TestDatabase } from "../helpers/db";
import { waitUntil } from "./support";

/**
 * Fairness of settlement side effects: user A has many settled batches, a webhook endpoint that
 * takes seconds to answer and wake-ups whose lead runs take seconds; user B's single batch still
 * gets its delivery and its wake-up promptly, and A never has more than the per-user limit of
 * deliveries in flight. Real HTTP receiver on loopback, real PostgreSQL, the web process's runner.
 */

const SLOW_MS = 3_000;
const A_BATCHES = 20;

let slowInFlight = 0;
let slowMaxInFlight = 0;
const fastArrivals: { at: number; body: string; headers: http.IncomingHttpHeaders }[] = [];
const receiver = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => {
    body += String(c);
  });
  req.on("end", () => {
    if (req.url === "/slow") {
      slowInFlight++;
      slowMaxInFlight = Math.max(slowMaxInFlight, slowInFlight);
      setTimeout(() => {
        slowInFlight--;
        res.writeHead(200).end();
      }, SLOW_MS);
    } else {
      fastArrivals.push({ at: Date.now(), body, headers: req.headers });
      res.writeHead(200).end();
    }
  });
});
await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const port = (receiver.address() as AddressInfo).port;
const config = testConfig({ webhooks: { allow_hosts: [`127.0.0.1:${port}`] }, simulator: { latency_ms: 10 } });

let t: TestDatabase;
let a: TestUser;
let b: TestUser;

beforeAll(async () => {
  t = await setupApiDatabase();
  a = await makeUser(t, "slow-a");
  b = await makeUser(t, "fast-b");
});

afterAll(async () => {
  receiver.closeAllConnections();
  await new Promise((resolve) => receiver.close(resolve));
});

/** A lead-submitted batch (so it wakes the lead), settled at once by a cancel. */
async function settledLeadBatch(who: TestUser, threadId: string): Promise<string> {
  const runId = randomUUID();
  const { batch } = await submitBatch(t.db, {
    ...batchSubagent(config, undefined),
    userId: who.userId,
    threadId,
    input: { submission_key: `${runId}:call-1`, items: ["x"] },
    config,
    model: SIM_MODEL,
    origin: { kind: "tool", runId, toolCallId: "call-1" },
  });
  await cancelBatch(t.db, { userId: who.userId, threadId, batchId: batch.id });
  return batch.id;
}

describe("fairness between users", () => {
  it("delivers user B's webhook and wakes B's lead promptly while user A's many slow ones wait their turn", async () => {
    await setWebhook(t.db, { config, userId: a.userId, url: `http://127.0.0.1:${port}/slow` });
    const { secret } = await setWebhook(t.db, { config, userId: b.userId, url: `http://127.0.0.1:${port}/fast` });
    const aThreads = await Promise.all(Array.from({ length: 4 }, () => makeThread(t, a)));
    const aBatches = new Set<string>();
    for (let i = 0; i < A_BATCHES; i++) aBatches.add(await settledLeadBatch(a, aThreads[i % aThreads.length]!));
    const bThread = await makeThread(t, b);
    const bBatch = await settledLeadBatch(b, bThread);

    // A's lead runs take seconds (the model provider is slow for A's batches), B's are quick.
    const sim = resolveModel(config, {});
    const slowForA = async (options: unknown) => {
      if ([...aBatches].some((id) => JSON.stringify(options).includes(id))) await sleep(SLOW_MS);
    };
    const model = {
      ...sim,
      model: {
        ...sim.model,
        doGenerate: async (options) => {
          await slowForA(options);
          return sim.model.doGenerate(options);
        },
        doStream: async (options) => {
          await slowForA(options);
          return sim.model.doStream(options);
        },
      } as LanguageModelV3,
    };

    const started = Date.now();
    const stop = startSettlementRunner({ db: t.db, config, owner: "web-fair", model, intervalMs: 50, backoffBaseMs: 200 });
    try {
      const delivered = await waitUntil("B's delivery", async () => fastArrivals[0], 30_000, 20);
      const deliveryMs = delivered.at - started;
      expect(new Webhook(secret).verify(delivered.body, delivered.headers as Record<string, string>)).toMatchObject({
        type: "batch.cancelled",
        data: { id: bBatch },
      });
      await waitUntil(
        "B's wake-up",
        async () => {
          const [row] = await t.db.execute<{ n: number }>(
            sql`select count(*)::int as n from batch_wakeups where batch_id = ${bBatch} and done_at is not null`,
          );
          return row!.n === 1 ? true : undefined;
        },
        30_000,
        20,
      );
      const wakeMs = Date.now() - started;
      console.log(`fairness: B delivered after ${deliveryMs} ms, B woken after ${wakeMs} ms`);
      // Before per-user fairness, B waited behind every one of A's wake-ups (20 × 3 s) and then
      // behind A's first ten slow deliveries.
      expect(deliveryMs).toBeLessThan(3_000);
      expect(wakeMs).toBeLessThan(8_000);
      // A got on with its own work meanwhile, never more than its limit at once.
      await waitUntil("A's first deliveries", async () => (slowMaxInFlight > 0 ? true : undefined), 10_000, 20);
      expect(slowMaxInFlight).toBeLessThanOrEqual(WEBHOOK_PER_USER_LIMIT);
      const [aDone] = await t.db.execute<{ n: number }>(
        sql`select count(*)::int as n from batch_wakeups where user_id = ${a.userId} and done_at is null`,
      );
      expect(aDone!.n).toBeGreaterThan(0); // A's wake-ups are still queued behind their own limit
    } finally {
      await stop();
    }
  }, 120_000);
});
