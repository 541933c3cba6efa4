import { sql } from "drizzle-orm";
import { beforeAll, describe, expect, it } from "vitest";
import { call, errorOf, makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";

/**
 * Per-user quotas and the total prompt size, through the submission route: 429 quota_exceeded
 * naming the quota (413 for the prompt size), nothing written, and race-safe.
 */

process.env.FLOTILLA__QUOTAS__MAX_ACTIVE_BATCHES = "3";
process.env.FLOTILLA__QUOTAS__MAX_QUEUED_ITEMS = "50";
process.env.FLOTILLA__SUBAGENT_BATCHES__MAX_TOTAL_PROMPT_CHARS = "100000";
const tdb = await setupApiDatabase();

let n = 0;
const submit = (user: TestUser, threadId: string, body: Record<string, unknown>) =>
  call("POST", `/api/threads/${threadId}/subagent-batches`, { token: user.token, json: { submission_key: `q-${++n}`, ...body } });
const counts = async () =>
  (
    await tdb.db.execute<{ batches: number; items: number }>(
      sql`select (select count(*)::int from subagent_batches) as batches, (select count(*)::int from subagent_batch_items) as items`,
    )
  )[0]!;

beforeAll(async () => {
  await workerAlive(tdb);
});

describe("quotas", () => {
  it("quotas.max_active_batches: the fourth active batch answers 429 naming the quota; a replay of an existing key still answers 200", async () => {
    const user = await makeUser(tdb, "active");
    const thread = await makeThread(tdb, user);
    for (let i = 0; i < 3; i++) expect((await submit(user, thread, { items: ["a"] })).status).toBe(201);
    const before = await counts();
    const res = await submit(user, thread, { items: ["a"] });
    expect(res.status).toBe(429);
    expect(await errorOf(res)).toEqual({ code: "quota_exceeded", message: expect.stringMatching(/^quotas\.max_active_batches: /) });
    expect(await counts()).toEqual(before);
    // Replay of the first submission: not a new batch, not refused.
    const replay = await call("POST", `/api/threads/${thread}/subagent-batches`, { token: user.token, json: { submission_key: `q-${n - 3}`, items: ["a"] } });
    expect(replay.status).toBe(200);
    // Another user is unaffected.
    const other = await makeUser(tdb, "other");
    expect((await submit(other, await makeThread(tdb, other), { items: ["a"] })).status).toBe(201);
  });

  it("quotas.max_queued_items counts the unfinished items of active batches", async () => {
    const user = await makeUser(tdb, "queued");
    const thread = await makeThread(tdb, user);
    expect((await submit(user, thread, { items: Array.from({ length: 30 }, (_, i) => `x${i}`) })).status).toBe(201);
    const before = await counts();
    const res = await submit(user, thread, { items: Array.from({ length: 21 }, (_, i) => `y${i}`) });
    expect(res.status).toBe(429);
    expect((await errorOf(res)).message).toMatch(/^quotas\.max_queued_items: 30 .* adds 21; at most 50/);
    expect(await counts()).toEqual(before);
    expect((await submit(user, thread, { items: Array.from({ length: 20 }, (_, i) => `z${i}`) })).status).toBe(201);
  });

  it("is race-safe: ten concurrent submissions by one user create exactly the quota", async () => {
    const user = await makeUser(tdb, "race");
    const thread = await makeThread(tdb, user);
    const results = await Promise.all(Array.from({ length: 10 }, () => submit(user, thread, { items: ["r"] })));
    expect(results.filter((r) => r.status === 201)).toHaveLength(3);
    expect(results.filter((r) => r.status === 429)).toHaveLength(7);
    const [row] = await tdb.db.execute<{ n: number }>(sql`select count(*)::int as n from subagent_batches where user_id = ${user.userId}`);
    expect(row!.n).toBe(3);
  });
});

describe("subagent_batches.max_total_prompt_chars", () => {
  it("refuses a template that would expand past the total, before expanding it, and writes nothing", async () => {
    const user = await makeUser(tdb, "prompt");
    const thread = await makeThread(tdb, user);
    const before = await counts();
    // 40 × (1,000 × "{{item}}" with a 3-character item) = 120,000 characters expanded from a ~9 KB body.
    const res = await submit(user, thread, {
      prompt_template: "{{item}}".repeat(1000),
      items: Array.from({ length: 40 }, (_, i) => `i${String(i).padStart(2, "0")}`),
    });
    expect(res.status).toBe(413);
    expect(await errorOf(res)).toEqual({
      code: "payload_too_large",
      message: expect.stringMatching(/would total 120000 characters; at most 100000 .*max_total_prompt_chars/),
    });
    expect(await counts()).toEqual(before);
    // Just under the total is accepted.
    expect((await submit(user, thread, { prompt_template: "{{item}}".repeat(1000), items: Array.from({ length: 33 }, (_, i) => `i${String(i).padStart(2, "0")}`) })).status).toBe(201);
  });
});
