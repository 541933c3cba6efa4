import { sql } from "drizzle-orm";
import Papa from "papaparse";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BatchProjection, type ItemPage, resultLineSchema } from "@/lib/api/batches";
import type { ReviewPage } from "@/lib/api/review-queue";
import type { ItemReview } from "@/lib/api/reviews";
import { exportPool } from "@/server/http/export";
import type { BatchWorker } from "@/server/worker/loop";
import { call, errorOf, rowCounts, type TestUser, } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";
import { judgingWorld } from "./support";

/**
 * Reviews through the HTTP routes, items run by a real worker: a submission's review policy
 * queues what finishes (failed / all / a deterministic sample), by hand too; decisions are
 * optimistic (one of two racing decisions wins, the other is a 409 that decides nothing); a
 * corrected answer is checked against the batch's schema and kept beside the model's.
 */

let t: TestDatabase;
let worker: BatchWorker;
let owner: TestUser;
let stranger: TestUser;
let thread: string;

beforeAll(async () => {
  ({ t, worker, owner, stranger, thread } = await judgingWorld("review-worker"));
});

afterAll(async () => {
  await worker.stop({ waitMs: 2_000 });
});

const base = () => `/api/threads/${thread}/subagent-batches`;
const get = async <T>(path: string, token = owner.token) => (await (await call("GET", path, { token })).json()) as T;

async function settled(batchId: string): Promise<BatchProjection> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const body = await get<BatchProjection>(`${base()}/${batchId}`);
    if (body.status === "completed" || body.status === "failed") return body;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`batch ${batchId} did not settle`);
}

async function submit(key: string, extra: Record<string, unknown>): Promise<string> {
  const res = await call("POST", base(), {
    token: owner.token,
    json: {
      submission_key: key,
      items: [
        { item_key: "a", answer: '{"label":"yes"}' },
        { item_key: "b", answer: '{"label":"no"}' },
        { item_key: "c", answer: '{"label":"no"}' },
        { item_key: "d", answer: '{"label":"yes"}' },
      ],
      prompt_template: "[[json:{{answer}}]]",
      output_schema: { type: "object", properties: { label: { type: "string", enum: ["yes", "no"] } }, required: ["label"] },
      checks: [
        { name: "is_yes", type: "regex", path: "/label", pattern: "^yes$" },
        { name: "sound", type: "judge", rubric: "Is the label a sound reading of the input?" },
      ],
      ...extra,
    },
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { id: string }).id;
}

describe("reviews", () => {
  let failedOnly: string;

  beforeAll(async () => {
    failedOnly = await submit("r1", { review: { when: "failed" } });
    await settled(failedOnly);
  }, 60_000);

  it("queues the failed items of a batch with review: failed, oldest first, across batches", async () => {
    const batch = await get<BatchProjection>(`${base()}/${failedOnly}`);
    expect(batch.reviews).toEqual({ pending: 2, accepted: 0, rejected: 0 });
    const queue = await get<ReviewPage>(`/api/reviews?batch_id=${failedOnly}`);
    expect(queue.items.map((e) => e.item_key).sort()).toEqual(["b", "c"]);
    expect(queue.pending).toBeGreaterThanOrEqual(2);
    expect(queue.items[0]).toMatchObject({ batch_id: failedOnly, batch_title: "[[json:{{answer}}]]", thread_id: thread, thread_title: "batches", verdict: "failed", output: { label: "no" }, review: { state: "pending", version: 0, corrected: false } });
    const page = await get<ItemPage>(`${base()}/${failedOnly}/items?review=pending`);
    expect(page.items.map((i) => i.item_key)).toEqual(["b", "c"]);
    expect((await errorOf(await call("GET", `${base()}/${failedOnly}/items?review=maybe`, { token: owner.token }))).message).toMatch(/^review: must be/);
  });

  it("decides at a version: one of two racing decisions wins, the stale one is a 409 that decides nothing", async () => {
    const [entry] = (await get<ReviewPage>(`/api/reviews?batch_id=${failedOnly}&limit=1`)).items;
    const path = `${base()}/${failedOnly}/items/${entry!.item_id}/review`;
    const [one, two] = await Promise.all([
      call("POST", path, { token: owner.token, json: { decision: "accept", note: "fine by me", version: 0 } }),
      call("POST", path, { token: owner.token, json: { decision: "accept", note: "yes, fine", version: 0 } }),
    ]);
    expect([one.status, two.status].sort()).toEqual([200, 409]);
    const winner = (await (one.status === 200 ? one : two).json()) as ItemReview;
    expect(winner.version).toBe(1);
    const loser = await errorOf(one.status === 409 ? one : two);
    expect(loser.message).toMatch(/^version: the review is at version 1/);
    const [row] = await t.db.execute<{ review_state: string; review_note: string }>(sql`select review_state, review_note from subagent_batch_items where id = ${entry!.item_id}`);
    expect(row).toEqual({ review_state: "accepted", review_note: winner.note });
  });

  it("keeps a corrected answer beside the model's, checked against the batch's schema (400 naming the path)", async () => {
    const queue = await get<ReviewPage>(`/api/reviews?batch_id=${failedOnly}`);
    const entry = queue.items[0]!;
    const path = `${base()}/${failedOnly}/items/${entry.item_id}/review`;
    const bad = await call("POST", path, { token: owner.token, json: { decision: "accept", output: { label: "maybe" }, version: entry.review.version } });
    expect(bad.status).toBe(400);
    expect((await errorOf(bad)).message).toMatch(/^output: does not match the batch's output_schema: \/label must be equal to one of the allowed values/);
    const ok = await call("POST", path, { token: owner.token, json: { decision: "accept", note: "it is yes", output: { label: "yes" }, version: entry.review.version } });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ state: "accepted", corrected: true, note: "it is yes" });
    const [row] = await t.db.execute<{ output: unknown; reviewed_output: unknown }>(sql`select output, reviewed_output from subagent_batch_items where id = ${entry.item_id}`);
    expect(row).toEqual({ output: { label: "no" }, reviewed_output: { label: "yes" } });
    const batch = await get<BatchProjection>(`${base()}/${failedOnly}`);
    expect(batch.reviews).toEqual({ pending: 0, accepted: 2, rejected: 0 });
    // The simulator's judge passed both; the person accepted both: full agreement. Regex checks carry none.
    expect(batch.checks).toEqual([
      { name: "is_yes", passed: 2, failed: 2 },
      { name: "sound", passed: 4, failed: 0, agreement: 1 },
    ]);
    expect((await get<ReviewPage>(`/api/reviews?batch_id=${failedOnly}`)).items).toEqual([]);
  });

  it("queues one item by hand; refuses bad bodies and other users (nothing written)", async () => {
    const page = await get<ItemPage>(`${base()}/${failedOnly}/items`);
    const passed = page.items.find((i) => i.item_key === "a")!;
    expect(passed.review).toBeNull();
    const path = `${base()}/${failedOnly}/items/${passed.id}/review`;
    const queued = await call("POST", path, { token: owner.token, json: { request: true } });
    expect(await queued.json()).toMatchObject({ state: "pending", version: 0 });
    const again = await call("POST", path, { token: owner.token, json: { request: true } });
    expect(await again.json()).toMatchObject({ state: "pending", version: 0 });

    const before = await rowCounts(t);
    for (const [body, message] of [
      [{ decision: "maybe", version: 0 }, /decision/],
      [{ decision: "accept" }, /version/],
      [{ decision: "accept", version: 0, note: "x".repeat(4_001) }, /^note: must be at most 4000/],
      [{ request: false }, /expected/],
    ] as const) {
      const res = await call("POST", path, { token: owner.token, json: body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await errorOf(res)).message).toMatch(message);
    }
    expect((await call("POST", path, { token: stranger.token, json: { request: true } })).status).toBe(404);
    expect((await get<ReviewPage>("/api/reviews", stranger.token)).items).toEqual([]);
    expect(await rowCounts(t)).toEqual(before);
  });

  it("samples deterministically by item_key, and the judge's agreement with the person is counted", async () => {
    const sampled = await submit("r2", { review: { when: "sample", rate: 0.5 } });
    const again = await submit("r3", { review: { when: "sample", rate: 0.5 } });
    await Promise.all([settled(sampled), settled(again)]);
    const keys = async (id: string) => (await get<ItemPage>(`${base()}/${id}/items?review=pending`)).items.map((i) => i.item_key);
    expect(await keys(sampled)).toEqual(await keys(again));
    const all = await submit("r4", { review: { when: "all" } });
    await settled(all);
    expect((await get<BatchProjection>(`${base()}/${all}`)).reviews.pending).toBe(4);
    const bad = await call("POST", base(), { token: owner.token, json: { submission_key: "r5", items: ["x"], review: { when: "sample" } } });
    expect((await errorOf(bad)).message).toBe('review.rate: is required when "when" is "sample"');
  });
});

describe("reviews in the downloads", () => {
  let server: WebServer;

  beforeAll(async () => {
    server = await startWebServer();
  });

  afterAll(async () => {
    await server.close();
    await exportPool().end({ timeout: 5 });
  });

  /** One request over real HTTP as the owner (a POST when json is given): its body, once it answered 200. */
  const http = async (path: string, json?: unknown) => {
    const res = await send(server, path, { headers: { authorization: `Bearer ${owner.token}` }, json });
    expect(res.status, `${path}: ${res.body.slice(0, 300)}`).toBe(200);
    return res.body;
  };

  /** A person's note that would start a formula in a spreadsheet. */
  const NOTE = '=HYPERLINK("http://evil.test","no, it is \\"yes\\"")';

  it("results.jsonl and results.csv carry review_state, review_note and reviewed_output as decided (the note formula-guarded in CSV)", async () => {
    const batchId = await submit("r6", { review: { when: "failed" } });
    await settled(batchId);
    const queue = JSON.parse(await http(`/api/reviews?batch_id=${batchId}`)) as ReviewPage;
    const entry = (key: string) => queue.items.find((e) => e.item_key === key)!;
    const decide = (key: string, body: Record<string, unknown>) =>
      http(`${base()}/${batchId}/items/${entry(key).item_id}/review`, { ...body, version: entry(key).review.version });
    await decide("b", { decision: "accept", output: { label: "yes" } });
    await decide("c", { decision: "reject", note: NOTE });

    const jsonl = await http(`${base()}/${batchId}/results.jsonl`);
    const lines = jsonl.trimEnd().split("\n").map((l) => resultLineSchema.parse(JSON.parse(l)));
    const review = (l: (typeof lines)[number]) => [l.item_key, l.output, l.review_state, l.review_note, l.reviewed_output];
    expect(lines.map(review)).toEqual([
      ["a", { label: "yes" }, null, null, null],
      ["b", { label: "no" }, "accepted", null, { label: "yes" }],
      ["c", { label: "no" }, "rejected", NOTE, null],
      ["d", { label: "yes" }, null, null, null],
    ]);

    const csvRows = async (query: string) => {
      const parsed = Papa.parse<string[]>(await http(`${base()}/${batchId}/results.csv${query}`), { skipEmptyLines: true });
      expect(parsed.errors).toEqual([]);
      const [header, ...rows] = parsed.data as [string[], ...string[][]];
      // The corrected answer as columns, one per output property, as the model's.
      expect(header.slice(-4)).toEqual(["error", "review_state", "review_note", "reviewed_output.label"]);
      return rows.map((r) => [r[0], ...r.slice(-3)]);
    };
    expect(await csvRows("")).toEqual([
      ["a", "", "", ""],
      ["b", "accepted", "", "yes"],
      ["c", "rejected", `'${NOTE}`, ""],
      ["d", "", "", ""],
    ]);
    expect((await csvRows("?raw=1"))[2]).toEqual(["c", "rejected", NOTE, ""]);
  });
});
