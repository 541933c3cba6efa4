import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type BatchProjection, batchProjectionSchema } from "@/lib/api/batches";
import { finishItems, itemIdAt, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * A retried batch's timing counts from the retry, over a real socket: the retry that reopens a
 * finished batch sets `reopened_at` (a retry of one item, or of every failed one), and the
 * server's throughput and ETA count only attempts that finished since then, over the time since
 * then — not the first run's attempts, nor the time the batch sat finished. Items are moved and
 * their attempts written with plain SQL, as a worker would, and nothing claims them.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let user: TestUser;
let threadId: string;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches"] });
  user = await makeUser(tdb, "timing");
  threadId = await makeThread(tdb, user);
});
afterAll(async () => {
  await server?.close();
});
beforeEach(async () => {
  // A live worker (the retry route needs one, and the ETA is only given while nothing waits for one).
  await workerAlive(tdb);
});

const base = () => `${server.origin}/api/threads/${threadId}/subagent-batches`;
async function post(path: string, json: unknown) {
  const res = await fetch(path, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify(json),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}
async function projection(batchId: string): Promise<BatchProjection> {
  const res = await fetch(`${base()}/${batchId}`, { headers: { authorization: `Bearer ${user.token}` } });
  expect(res.status).toBe(200);
  return batchProjectionSchema.parse(await res.json());
}

/** One attempt row per item at these positions, ended `secondsAgo` seconds ago (what a worker's settle writes). */
async function attemptsEnded(batchId: string, positions: number[], outcome: "succeeded" | "failed", secondsAgo: number) {
  await tdb.sql`
    insert into subagent_batch_item_attempts (item_id, batch_id, attempt, worker_id, outcome, leased_at, started_at, finished_at)
    select id, batch_id, 1, 'test-worker', ${outcome},
           now() - make_interval(secs => ${secondsAgo + 2}), now() - make_interval(secs => ${secondsAgo + 1}),
           now() - make_interval(secs => ${secondsAgo})
      from subagent_batch_items where batch_id = ${batchId} and position in ${tdb.sql(positions)}`;
}

let n = 0;
/** A batch of ten that ran ten minutes ago and finished two minutes ago: 1–6 succeeded, 7–10 failed. */
async function finishedBatch(): Promise<string> {
  const created = await post(base(), { submission_key: `timing-${++n}`, items: Array.from({ length: 10 }, (_, i) => `item ${i + 1}`) });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const id = created.body.id as string;
  await finishItems(tdb, id, [1, 2, 3, 4, 5, 6], { status: "succeeded", result: "ok" });
  await finishItems(tdb, id, [7, 8, 9, 10], { status: "failed", error: "boom" });
  // The first run's attempts ended within the ETA's five-minute window, but before any retry.
  await attemptsEnded(id, [1, 2, 3, 4, 5, 6], "succeeded", 120);
  await attemptsEnded(id, [7, 8, 9, 10], "failed", 120);
  await tdb.sql`update subagent_batches set started_at = now() - interval '10 minutes' where id = ${id}`;
  return id;
}

describe("a retry that reopens a finished batch", () => {
  it("counts elapsed time, throughput and ETA from the retry", async () => {
    const id = await finishedBatch();
    const before = await projection(id);
    expect(before).toMatchObject({ status: "completed", reopened_at: null, eta: null });

    const retried = await post(`${base()}/${id}/retry`, { status: ["failed"] });
    expect(retried).toEqual({ status: 200, body: { retried: 4 } });
    const reopened = await projection(id);
    expect(reopened.status).toBe("running");
    expect(reopened.started_at).toBe(before.started_at);
    expect(Math.abs(Date.parse(reopened.reopened_at!) - Date.now())).toBeLessThan(10_000);

    // Thirty seconds into the retry, three of the four retried items have ended (ten seconds ago).
    await tdb.sql`update subagent_batches set reopened_at = now() - interval '30 seconds' where id = ${id}`;
    const retryAt = (await projection(id)).reopened_at;
    await finishItems(tdb, id, [7, 8, 9], { status: "succeeded", result: "ok" });
    await attemptsEnded(id, [7, 8, 9], "succeeded", 10);
    const eta = (await projection(id)).eta;
    // Only the retry's three attempts over its thirty seconds: 6 a minute, the last item in 10 s.
    // (Counted from the first start, the first run's ten attempts and the idle time would say 2.6 a minute.)
    expect(eta).toMatchObject({ window_seconds: 30, finished_in_window: 3, remaining: 1 });
    // (The request itself takes a moment past the thirty seconds.)
    expect(eta!.items_per_minute).toBeGreaterThanOrEqual(5.5);
    expect(eta!.items_per_minute).toBeLessThanOrEqual(6);
    expect(eta!.eta_seconds).toBeGreaterThanOrEqual(10);
    expect(eta!.eta_seconds).toBeLessThanOrEqual(11);

    await finishItems(tdb, id, [10], { status: "succeeded", result: "ok" });
    const settled = await projection(id);
    expect(settled.status).toBe("completed");
    // Settled again, it keeps the retry's start: the panel's elapsed time is the retry's half a minute, not ten.
    expect(settled.reopened_at).toBe(retryAt);
    expect(Date.parse(settled.finished_at!) - Date.parse(settled.reopened_at!)).toBeLessThan(60_000);
  });

  it("is set by a retry of one item too, and not by a retry of a batch that had not finished", async () => {
    const id = await finishedBatch();
    const item = await itemIdAt(tdb, id, 7);
    const one = await post(`${base()}/${id}/items/${item}/retry`, {});
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    const reopened = await projection(id);
    expect(reopened.status).toBe("running");
    expect(reopened.reopened_at).not.toBeNull();

    // Still running: retrying another failed item reopens nothing, so the clock is not reset.
    await tdb.sql`update subagent_batches set reopened_at = now() - interval '1 minute' where id = ${id}`;
    const mark = (await projection(id)).reopened_at;
    const again = await post(`${base()}/${id}/retry`, { status: ["failed"] });
    expect(again).toEqual({ status: 200, body: { retried: 3 } });
    expect((await projection(id)).reopened_at).toBe(mark);

    // A batch that never finished was never reopened.
    const fresh = await post(base(), { submission_key: `timing-${++n}`, items: ["x", "y"] });
    await finishItems(tdb, fresh.body.id as string, [1], { status: "failed", error: "boom" });
    expect(await post(`${base()}/${fresh.body.id}/retry`, { status: ["failed"] })).toEqual({ status: 200, body: { retried: 1 } });
    expect((await projection(fresh.body.id as string)).reopened_at).toBeNull();
  });
});
