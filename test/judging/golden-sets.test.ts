import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection, ItemPage } from "@/lib/api/batches";
import type { GoldenItem, GoldenItemPage, GoldenSetAdded, GoldenSetCreated, GoldenSetDetail } from "@/lib/api/golden-sets";
import type { ReviewPage } from "@/lib/api/review-queue";
import type { BatchWorker } from "@/server/worker/loop";
import { makeThread, type TestUser, } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";
import { judgingWorld } from "./support";

/**
 * Golden sets over real HTTP sockets, from batches a real worker ran and a person reviewed:
 * accepted items give the model's answer, corrected ones the person's, rejected ones without a
 * correction nothing; an add makes a new version (an item_key already there takes the newer
 * answer) and earlier versions read as they were; pages and the JSONL download; another user's
 * set or batch is a 404 and a bad body a 400 naming the field, writing nothing.
 */

let t: TestDatabase;
let worker: BatchWorker;
let server: WebServer;
let owner: TestUser;
let stranger: TestUser;
let thread: string;

beforeAll(async () => {
  ({ t, worker, owner, stranger, thread } = await judgingWorld("golden-worker"));
  server = await startWebServer();
});

afterAll(async () => {
  await server.close();
  await worker.stop({ waitMs: 2_000 });
});

/** One request over a real socket: its status and parsed body (a POST when json is given). */
async function http<T = unknown>(path: string, options: { json?: unknown; method?: string; user?: TestUser } = {}) {
  const res = await send(server, path, { method: options.method, headers: { authorization: `Bearer ${(options.user ?? owner).token}` }, json: options.json });
  return { status: res.status, body: (res.body && res.headers["content-type"]?.includes("json") && !res.headers["content-type"].includes("ndjson") ? JSON.parse(res.body) : res.body) as T, headers: res.headers };
}
async function ok<T>(path: string, options: { json?: unknown; method?: string; user?: TestUser } = {}, status = 200): Promise<T> {
  const res = await http<T>(path, options);
  expect(res.status, `${path}: ${JSON.stringify(res.body).slice(0, 300)}`).toBe(status);
  return res.body;
}
const messageOf = (body: unknown) => (body as { error: { message: string } }).error.message;

const batches = () => `/api/threads/${thread}/subagent-batches`;

async function settled(batchId: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const body = await ok<BatchProjection>(`${batches()}/${batchId}`);
    if (body.status === "completed" || body.status === "failed") return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`batch ${batchId} did not settle`);
}

/** Submits, waits for the worker, and decides each item's review as `decisions` says (by item_key). */
async function reviewedBatch(key: string, body: Record<string, unknown>, decisions: Record<string, Record<string, unknown>>): Promise<string> {
  const { id } = await ok<{ id: string }>(batches(), { json: { submission_key: key, review: { when: "all" }, ...body } }, 201);
  await settled(id);
  const queue = await ok<ReviewPage>(`/api/reviews?batch_id=${id}`);
  for (const entry of queue.items) {
    const decision = decisions[entry.item_key];
    if (decision) await ok(`${batches()}/${id}/items/${entry.item_id}/review`, { json: { ...decision, version: entry.review.version } });
  }
  return id;
}

const LABELS = {
  items: [
    { item_key: "a", answer: '{"label":"yes"}' },
    { item_key: "b", answer: '{"label":"no"}' },
    { item_key: "c", answer: '{"label":"no"}' },
    { item_key: "d", answer: '{"label":"yes"}' },
    { item_key: "e", answer: '{"label":"yes"}' },
  ],
  prompt_template: "[[json:{{answer}}]]",
  output_schema: { type: "object", properties: { label: { type: "string", enum: ["yes", "no"] } }, required: ["label"] },
};

async function rowCounts(): Promise<{ sets: number; versions: number; items: number }> {
  const [row] = await t.sql<{ sets: number; versions: number; items: number }[]>`
    select (select count(*)::int from golden_sets) as sets, (select count(*)::int from golden_set_versions) as versions,
           (select count(*)::int from golden_set_items) as items`;
  return row!;
}

const strip = (items: GoldenItem[]) => items.map(({ source, ...item }) => ({ ...item, decision: source?.decision }));

describe("golden sets", () => {
  let labels: string;

  beforeAll(async () => {
    labels = await reviewedBatch("g1", LABELS, {
      a: { decision: "accept" },
      b: { decision: "accept", output: { label: "yes" } },
      c: { decision: "reject", note: "wrong" },
      d: { decision: "reject", output: { label: "no" } },
      // e stays pending: not reviewed, not taken.
    });
  }, 60_000);

  it("takes a batch's accepted answers as the model gave them and corrected ones as the person gave them, leaving out rejected ones", async () => {
    const created = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "labels", from_batch: { batch_id: labels } } }, 201);
    expect(created).toMatchObject({ name: "labels", version: 1, items: 3 });
    const page = await ok<GoldenItemPage>(`/api/golden-sets/${created.id}/items`);
    expect(strip(page.items)).toEqual([
      { item_key: "a", fields: { answer: '{"label":"yes"}' }, expected: { label: "yes" }, decision: "accepted" },
      { item_key: "b", fields: { answer: '{"label":"no"}' }, expected: { label: "yes" }, decision: "corrected" },
      { item_key: "d", fields: { answer: '{"label":"yes"}' }, expected: { label: "no" }, decision: "corrected" },
    ]);
    const items = await ok<ItemPage>(`${batches()}/${labels}/items`);
    expect(page.items[0]!.source).toEqual({ batch_id: labels, item_id: items.items.find((i) => i.item_key === "a")!.id, decision: "accepted" });
    expect(page.next_cursor).toBeNull();

    // include narrows it: only the corrections.
    const corrected = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "fixes", from_batch: { batch_id: labels, include: ["corrected"] } } }, 201);
    expect(corrected.items).toBe(2);
    const list = await ok<{ golden_sets: { id: string; name: string; version: number; items: number }[] }>("/api/golden-sets");
    expect(list.golden_sets.map((s) => [s.name, s.version, s.items])).toEqual([
      ["fixes", 1, 2],
      ["labels", 1, 3],
    ]);
  });

  it("an untyped batch's accepted answer is its result text, beside the input that filled {{item}}", async () => {
    const id = await reviewedBatch("g2", { items: ["north", "south"], prompt_template: "Name the pole: {{item}}" }, { "item-1": { decision: "accept" }, "item-2": { decision: "reject" } });
    const results = await ok<ItemPage>(`${batches()}/${id}/items`);
    const created = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "poles", from_batch: { batch_id: id } } }, 201);
    const page = await ok<GoldenItemPage>(`/api/golden-sets/${created.id}/items`);
    const result = results.items.find((i) => i.item_key === "item-1")!.preview;
    expect(typeof result).toBe("string");
    expect(strip(page.items)).toEqual([{ item_key: "item-1", input: "north", expected: result, decision: "accepted" }]);
  });

  it("an add makes the next version (a key already there takes the newer answer); earlier versions read as they were", async () => {
    const set = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "v", items: [{ item_key: "a", input: "one", expected: "1" }, { item_key: "b", input: "two", expected: "2" }] } }, 201);
    const added = await ok<GoldenSetAdded>(`/api/golden-sets/${set.id}/add`, { json: { items: [{ item_key: "b", input: "two", expected: "II" }, { item_key: "c", input: "three", expected: "3" }] } });
    expect(added).toEqual({ version: 2, items: 3, added: 1, replaced: 1 });
    // From a reviewed batch too: a, b, d answered again (replaced), nothing new.
    const third = await ok<GoldenSetAdded>(`/api/golden-sets/${set.id}/add`, { json: { from_batch: { batch_id: labels } } });
    expect(third).toEqual({ version: 3, items: 4, added: 1, replaced: 2 });

    const version = async (v?: number) => (await ok<GoldenItemPage>(`/api/golden-sets/${set.id}/items${v ? `?version=${v}` : ""}`)).items.map((i) => [i.item_key, i.expected]);
    expect(await version(1)).toEqual([["a", "1"], ["b", "2"]]);
    expect(await version(2)).toEqual([["a", "1"], ["b", "II"], ["c", "3"]]);
    expect(await version()).toEqual([["a", { label: "yes" }], ["b", { label: "yes" }], ["c", "3"], ["d", { label: "no" }]]);
    const detail = await ok<GoldenSetDetail>(`/api/golden-sets/${set.id}`);
    expect(detail.version).toBe(3);
    expect(detail.versions.map((v) => [v.version, v.items, v.source])).toEqual([
      [1, 2, { from: "items" }],
      [2, 3, { from: "items" }],
      [3, 4, { from: "batch", batch_id: labels }],
    ]);
    const missing = await http(`/api/golden-sets/${set.id}/items?version=4`);
    expect(missing.status).toBe(400);
    expect(messageOf(missing.body)).toBe("version: this set has versions 1 to 3");
  });

  it("pages a version in item_key order and downloads it whole as JSON lines", async () => {
    const keys = Array.from({ length: 7 }, (_, i) => `k${i}`);
    const set = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "pages", items: keys.map((k) => ({ item_key: k, fields: { q: k, n: 1 }, expected: { a: k } })) } }, 201);
    await ok(`/api/golden-sets/${set.id}/add`, { json: { items: [{ item_key: "k9", input: "late", expected: "x" }] } });
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: GoldenItemPage = await ok<GoldenItemPage>(`/api/golden-sets/${set.id}/items?version=1&limit=3${cursor ? `&cursor=${cursor}` : ""}`);
      expect(page.items.length).toBeLessThanOrEqual(3);
      seen.push(...page.items.map((i) => i.item_key));
      cursor = page.next_cursor;
    } while (cursor);
    expect(seen).toEqual(keys);

    const download = await http<string>(`/api/golden-sets/${set.id}/items.jsonl?version=1`);
    expect(download.status).toBe(200);
    expect(download.headers["content-type"]).toBe("application/x-ndjson; charset=utf-8");
    expect(download.headers["content-disposition"]).toContain(`golden-set-${set.id}-v1.jsonl`);
    const lines = download.body.trimEnd().split("\n").map((l) => JSON.parse(l) as GoldenItem);
    expect(lines).toEqual(keys.map((k) => ({ item_key: k, fields: { q: k, n: 1 }, expected: { a: k } })));
    const newest = (await http<string>(`/api/golden-sets/${set.id}/items.jsonl`)).body.trimEnd().split("\n");
    expect(newest).toHaveLength(8);
    expect(JSON.parse(newest[7]!)).toEqual({ item_key: "k9", input: "late", expected: "x" });
    const bad = await http(`/api/golden-sets/${set.id}/items?cursor=nope`);
    expect([bad.status, messageOf(bad.body)]).toEqual([400, "cursor: not a cursor returned by this API"]);
  });

  it("another user's set or batch is a 404, and touches nothing", async () => {
    const set = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "mine", items: [{ input: "x", expected: "y" }] } }, 201);
    const before = await rowCounts();
    for (const [method, path, json] of [
      ["GET", `/api/golden-sets/${set.id}`, undefined],
      ["GET", `/api/golden-sets/${set.id}/items`, undefined],
      ["GET", `/api/golden-sets/${set.id}/items.jsonl`, undefined],
      ["POST", `/api/golden-sets/${set.id}/add`, { items: [{ input: "x", expected: "z" }] }],
      ["DELETE", `/api/golden-sets/${set.id}`, undefined],
      ["POST", "/api/golden-sets", { name: "theirs", from_batch: { batch_id: labels } }],
      ["GET", "/api/golden-sets/not-a-uuid", undefined],
    ] as const) {
      const res = await http(path, { method, json, user: stranger });
      expect(res.status, `${method} ${path}`).toBe(404);
    }
    // The owner adding a stranger's batch to their own set: 404 too.
    const theirs = await ok<{ id: string }>(`/api/threads/${await makeThread(t, stranger)}/subagent-batches`, { user: stranger, json: { submission_key: "s1", items: ["x"] } }, 201);
    expect((await http(`/api/golden-sets/${set.id}/add`, { json: { from_batch: { batch_id: theirs.id } } })).status).toBe(404);
    expect((await ok<{ golden_sets: unknown[] }>("/api/golden-sets", { user: stranger })).golden_sets).toEqual([]);
    expect(await rowCounts()).toEqual(before);
  });

  it("refuses bad bodies with a 400 naming the field, writing nothing", async () => {
    const set = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "strict", items: [{ item_key: "a", input: "x", expected: "y" }] } }, 201);
    const before = await rowCounts();
    const item = { input: "x", expected: "y" };
    const cases: [string, unknown, string][] = [
      ["/api/golden-sets", { items: [item] }, "name: is required"],
      ["/api/golden-sets", { name: " ", items: [item] }, "name: must not be empty"],
      ["/api/golden-sets", { name: "n" }, "from_batch: give exactly one of from_batch and items"],
      ["/api/golden-sets", { name: "n", items: [item], from_batch: { batch_id: labels } }, "from_batch: give exactly one of from_batch and items"],
      ["/api/golden-sets", { name: "n", from_batch: { batch_id: labels, include: ["rejected"] } }, 'from_batch.include.0: must be "accepted" or "corrected"'],
      ["/api/golden-sets", { name: "n", items: [item, { input: "z" }] }, "items.1.expected: is required"],
      ["/api/golden-sets", { name: "n", items: [item, { expected: 1 }] }, "items.1: give exactly one of input and fields"],
      ["/api/golden-sets", { name: "n", items: [item, { fields: { q: { deep: 1 } }, expected: 1 }] }, "items.1.fields.q: must be a string, a number or a boolean"],
      ["/api/golden-sets", { name: "n", items: [{ item_key: "k", ...item }, { item_key: "k", ...item }] }, 'items.1.item_key: "k" is given twice (first used by items.0)'],
      ["/api/golden-sets", { name: "n", items: [{ ...item, extra: 1 }] }, 'items.0: Unrecognized key: "extra"'],
      [`/api/golden-sets/${set.id}/add`, { items: [{ item_key: "", ...item }] }, "items.0.item_key: must not be empty"],
      [`/api/golden-sets/${set.id}/add`, {}, "from_batch: give exactly one of from_batch and items"],
    ];
    for (const [path, json, message] of cases) {
      const res = await http(path, { json });
      expect(res.status, JSON.stringify(json)).toBe(400);
      expect(messageOf(res.body)).toBe(message);
    }
    // A batch with nothing reviewed gives nothing to take.
    const unreviewed = await ok<{ id: string }>(batches(), { json: { submission_key: "g3", items: ["x"] } }, 201);
    const empty = await http(`/api/golden-sets/${set.id}/add`, { json: { from_batch: { batch_id: unreviewed.id } } });
    expect([empty.status, messageOf(empty.body)]).toEqual([400, "from_batch: the batch has no accepted or corrected items to take (review some first)"]);
    expect(await rowCounts()).toEqual(before);
    expect((await ok<GoldenSetDetail>(`/api/golden-sets/${set.id}`)).version).toBe(1);
  });

  it("deletes a set with its versions and items", async () => {
    const set = await ok<GoldenSetCreated>("/api/golden-sets", { json: { name: "gone", items: [{ input: "x", expected: "y" }] } }, 201);
    await ok(`/api/golden-sets/${set.id}/add`, { json: { items: [{ input: "z", expected: "w" }] } });
    const before = await rowCounts();
    expect(await ok(`/api/golden-sets/${set.id}`, { method: "DELETE" })).toEqual({ id: set.id, deleted: true });
    expect(await rowCounts()).toEqual({ sets: before.sets - 1, versions: before.versions - 2, items: before.items - 2 });
    expect((await http(`/api/golden-sets/${set.id}`)).status).toBe(404);
  });
});
