import { sql } from "drizzle-orm";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { ITEM_PROMPT_MAX_CHARS } from "@/lib/batch-rules";
import { finishItems, itemIdAt, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * Retries are submissions (DESIGN "Holding under abuse (third round)"), over a real socket: a
 * batch retry and an item retry pass the quotas a submission passes (429 quota_exceeded naming
 * the quota, nothing re-queued), the daily token quota, and a corrected input every rule an item
 * of a submission passes (its prompt's length, the batch's total), under the same per-user lock.
 * Items are finished with plain SQL and nothing claims them: what is tested is the door.
 */

process.env.FLOTILLA__QUOTAS__MAX_ACTIVE_BATCHES = "2";
process.env.FLOTILLA__QUOTAS__MAX_QUEUED_ITEMS = "50";
process.env.FLOTILLA__QUOTAS__MAX_TOKENS_PER_DAY = "1000000";
process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_TOTAL_PROMPT_CHARS = "100000";
const tdb = await setupApiDatabase();
let server: WebServer;

beforeAll(async () => {
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches"] });
});
afterAll(async () => {
  await server?.close();
});
beforeEach(async () => {
  // Only a heartbeat: the routes need a live worker, and nothing may run the items.
  await workerAlive(tdb);
});

let n = 0;
/** What the routes answer: a projection, or `{ error }`. */
type Answer = { status: number; body: Record<string, unknown> & { id?: string; error?: { code: string; message: string }; item?: unknown } };
async function post(user: TestUser, path: string, json: unknown): Promise<Answer> {
  const res = await fetch(`${server.origin}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${user.token}`, "content-type": "application/json" },
    body: JSON.stringify(json),
  });
  return { status: res.status, body: await res.json() };
}
const batches = (thread: string) => `/api/threads/${thread}/subagent-batches`;

async function submit(user: TestUser, thread: string, body: Record<string, unknown>): Promise<string> {
  const res = await post(user, batches(thread), { submission_key: `rq-${++n}`, ...body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.id as string;
}

/** A batch whose every item failed (the batch failed with them). */
async function failedBatch(user: TestUser, thread: string, items: string[]): Promise<string> {
  const id = await submit(user, thread, { items });
  await finishItems(tdb, id, items.map((_, i) => i + 1), { status: "failed", error: "boom" });
  return id;
}

const batchStatus = async (id: string) =>
  (await tdb.sql<{ status: string }[]>`select status from subagent_batches where id = ${id}`)[0]!.status;

describe("a retry passes a submission's quotas", () => {
  it("quotas.max_active_batches: retrying a finished batch while two are active answers 429 and re-queues nothing", async () => {
    const user = await makeUser(tdb, "active");
    const thread = await makeThread(tdb, user);
    const finished = await failedBatch(user, thread, ["a"]);
    const itemId = await itemIdAt(tdb, finished, 1);
    expect(await batchStatus(finished)).toBe("failed");
    await submit(user, thread, { items: ["b"] });
    const third = await submit(user, thread, { items: ["c", "d"] });

    const before = await rowCounts(tdb);
    const byBatch = await post(user, `${batches(thread)}/${finished}/retry`, { status: ["failed"] });
    expect(byBatch.status).toBe(429);
    expect(byBatch.body.error).toEqual({ code: "quota_exceeded", message: expect.stringMatching(/^quotas\.max_active_batches: you have 2 active batches/) });
    const byItem = await post(user, `${batches(thread)}/${finished}/items/${itemId}/retry`, {});
    expect(byItem.status).toBe(429);
    expect(byItem.body.error?.message).toMatch(/^quotas\.max_active_batches: /);
    const corrected = await post(user, `${batches(thread)}/${finished}/items/${itemId}/retry`, { input: "a, corrected" });
    expect(corrected.status).toBe(429);
    // Nothing moved, nothing was rewritten (not even the corrected input).
    expect(await rowCounts(tdb)).toEqual(before);
    expect(await batchStatus(finished)).toBe("failed");

    // A retry inside an already active batch opens no batch: only the items count.
    await finishItems(tdb, third, [1], { status: "failed", error: "boom" });
    expect(await batchStatus(third)).toBe("queued");
    const inside = await post(user, `${batches(thread)}/${third}/retry`, { status: ["failed"] });
    expect(inside).toMatchObject({ status: 200, body: { retried: 1 } });

    // With a slot free, the finished batch's retry goes through.
    expect((await post(user, `${batches(thread)}/${third}/cancel`, {})).status).toBe(200);
    expect(await post(user, `${batches(thread)}/${finished}/retry`, { status: ["failed"] })).toMatchObject({ status: 200, body: { retried: 1 } });
    expect(await batchStatus(finished)).toBe("running");
  });

  it("quotas.max_queued_items counts what the retry re-queues", async () => {
    const user = await makeUser(tdb, "queued");
    const thread = await makeThread(tdb, user);
    const finished = await failedBatch(user, thread, Array.from({ length: 30 }, (_, i) => `f${i}`));
    await submit(user, thread, { items: Array.from({ length: 25 }, (_, i) => `q${i}`) });
    const before = await rowCounts(tdb);
    const res = await post(user, `${batches(thread)}/${finished}/retry`, { status: ["failed"] });
    expect(res.status).toBe(429);
    expect(res.body.error).toEqual({
      code: "quota_exceeded",
      message: "quotas.max_queued_items: 25 of your items are unfinished and this retry adds 30; at most 50 at once",
    });
    expect(await rowCounts(tdb)).toEqual(before);
    // One item fits.
    const one = await post(user, `${batches(thread)}/${finished}/items/${await itemIdAt(tdb, finished, 7)}/retry`, {});
    expect(one.status).toBe(200);
    expect(one.body.item).toMatchObject({ position: 7, status: "queued" });
  });

  it("the daily token quota: a user over it cannot retry", async () => {
    const user = await makeUser(tdb, "tokens");
    const thread = await makeThread(tdb, user);
    const finished = await failedBatch(user, thread, ["a", "b"]);
    // Today's usage at the quota (the finished items already counted some).
    await tdb.sql`insert into user_daily_tokens (user_id, day, tokens)
                  values (${user.userId}, (now() at time zone 'utc')::date, 1000000)
                  on conflict (user_id, day) do update set tokens = excluded.tokens`;
    const before = await rowCounts(tdb);
    for (const [path, body] of [
      [`${batches(thread)}/${finished}/retry`, { status: ["failed"] }],
      [`${batches(thread)}/${finished}/items/${await itemIdAt(tdb, finished, 1)}/retry`, { input: "a again" }],
    ] as const) {
      const res = await post(user, path, body);
      expect(res.status).toBe(429);
      expect(res.body.error).toEqual({ code: "quota_exceeded", message: expect.stringMatching(/^daily token quota reached: 1000000 of 1000000 /) });
    }
    expect(await rowCounts(tdb)).toEqual(before);
    // Another user is not held by it.
    const other = await makeUser(tdb, "tokens-other");
    const otherThread = await makeThread(tdb, other);
    const theirs = await failedBatch(other, otherThread, ["a"]);
    expect((await post(other, `${batches(otherThread)}/${theirs}/retry`, { status: ["failed"] })).status).toBe(200);
  });

  it("takes the submission's per-user lock: with one slot left, one of a submission and two retries wins", async () => {
    for (let round = 0; round < 3; round++) {
      const user = await makeUser(tdb, `race${round}`);
      const thread = await makeThread(tdb, user);
      const a = await failedBatch(user, thread, ["a"]);
      const b = await failedBatch(user, thread, ["b"]);
      await submit(user, thread, { items: ["active"] });
      const bItem = await itemIdAt(tdb, b, 1);
      const results = await Promise.all([
        post(user, `${batches(thread)}/${a}/retry`, { status: ["failed"] }),
        post(user, `${batches(thread)}/${b}/items/${bItem}/retry`, {}),
        post(user, batches(thread), { submission_key: `race-${round}`, items: ["new"] }),
      ]);
      const won = results.filter((r) => r.status === 200 || r.status === 201);
      const refused = results.filter((r) => r.status === 429);
      expect(won).toHaveLength(1);
      expect(refused.map((r) => r.body.error?.code)).toEqual(["quota_exceeded", "quota_exceeded"]);
      const [row] = await tdb.sql<{ active: number }[]>`
        select count(*)::int as active from subagent_batches
         where user_id = ${user.userId} and status in ('queued', 'running', 'paused')`;
      expect(row!.active).toBe(2);
    }
  });
});

describe("a corrected input passes a submission item's rules", () => {
  it("a prompt over the per-item limit answers 400 naming input; past the batch's total 413; nothing is rewritten", async () => {
    const user = await makeUser(tdb, "prompt");
    const thread = await makeThread(tdb, user);
    const templated = await failedBatch(user, thread, ["x"]);
    const res = await post(user, `${batches(thread)}/${templated}/items/${await itemIdAt(tdb, templated, 1)}/retry`, {
      input: "y".repeat(ITEM_PROMPT_MAX_CHARS + 1),
    });
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual({
      code: "validation_failed",
      message: `input: prompt is ${ITEM_PROMPT_MAX_CHARS + 1} characters; at most ${ITEM_PROMPT_MAX_CHARS} per item`,
    });

    // Three prompts of 30,000 characters under a total of 100,000: one may grow to 40,000, not past it.
    const big = await submit(user, thread, { prompt_template: "{{item}}", items: ["a", "b", "c"].map((c) => c.repeat(30_000)) });
    await finishItems(tdb, big, [1, 2, 3], { status: "failed", error: "boom" });
    const first = await itemIdAt(tdb, big, 1);
    const before = await rowCounts(tdb);
    const over = await post(user, `${batches(thread)}/${big}/items/${first}/retry`, { input: "z".repeat(40_001) });
    expect(over.status).toBe(413);
    expect(over.body.error).toEqual({
      code: "payload_too_large",
      message: "input: the expanded prompts would total 100001 characters; at most 100000 per batch (subagent_batches.max_total_prompt_chars)",
    });
    expect(await rowCounts(tdb)).toEqual(before);
    const fits = await post(user, `${batches(thread)}/${big}/items/${first}/retry`, { input: "z".repeat(40_000) });
    expect(fits.status).toBe(200);
    const [row] = await tdb.db.execute<{ chars: number }>(sql`select length(prompt)::int as chars from subagent_batch_items where id = ${first}`);
    expect(row!.chars).toBe(40_000);
  });
});
