import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BatchProjection, ItemPage } from "@/lib/api/batches";
import type { CompareSummary } from "@/lib/api/compare";
import { GOLDEN_ITEMS_MAX, type GoldenItemPage, type GoldenSetAdded, type GoldenSetCreated } from "@/lib/api/golden-sets";
import type { ReviewPage } from "@/lib/api/review-queue";
import type { VariantDraft } from "@/lib/api/variants";
import type { BatchWorker } from "@/server/worker/loop";
import type { TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";
import { judgingWorld } from "./support";

/**
 * Runs against a golden set over real HTTP sockets with a real worker on the simulator: the
 * items come from the set's version, the check "golden" grades each answer against the set's
 * expected (field by field for a typed answer; a string "1" stays the string "1"), the batch
 * records the set and version, a variant runs on the same set, and a comparison of the two
 * runs shows which agrees more with it. Bad input is a 400 naming the field and writes nothing;
 * another user's set reads as an unknown one.
 */

let t: TestDatabase;
let worker: BatchWorker;
let server: WebServer;
let owner: TestUser;
let stranger: TestUser;
let thread: string;

beforeAll(async () => {
  ({ t, worker, owner, stranger, thread } = await judgingWorld("golden-runs-worker"));
  server = await startWebServer();
});

afterAll(async () => {
  await server.close();
  await worker.stop({ waitMs: 2_000 });
});

type Options = { json?: unknown; method?: string; user?: TestUser; body?: string | Buffer; headers?: Record<string, string> };

/** A multipart form (its file part `file`) as bytes and headers, serialized by the platform's own FormData. */
async function form(file: { name: string; type: string; text: string }, fields: Record<string, string> = {}): Promise<Options> {
  const data = new FormData();
  for (const [k, v] of Object.entries(fields)) data.set(k, v);
  data.set("file", new Blob([file.text], { type: file.type }), file.name);
  const req = new Request("http://x/", { method: "POST", body: data });
  return { body: Buffer.from(await req.arrayBuffer()), headers: { "content-type": req.headers.get("content-type")! } };
}
async function http<T = unknown>(path: string, options: Options = {}) {
  const res = await send(server, path, {
    method: options.method ?? (options.body !== undefined ? "POST" : undefined),
    headers: { authorization: `Bearer ${(options.user ?? owner).token}`, ...options.headers },
    json: options.json,
    body: options.body,
  });
  return { status: res.status, body: (res.headers["content-type"]?.includes("application/json") ? JSON.parse(res.body) : res.body) as T };
}
async function ok<T>(path: string, options: Options = {}, status = 200): Promise<T> {
  const res = await http<T>(path, options);
  expect(res.status, `${path}: ${JSON.stringify(res.body).slice(0, 300)}`).toBe(status);
  return res.body;
}
async function refused(path: string, options: Options, status = 400): Promise<string> {
  const res = await http<{ error: { message: string } }>(path, options);
  expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(status);
  return res.body.error.message;
}

const batches = () => `/api/threads/${thread}/subagent-batches`;

async function settled(batchId: string): Promise<BatchProjection> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const body = await ok<BatchProjection>(`${batches()}/${batchId}`);
    if (body.status === "completed" || body.status === "failed") return body;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`batch ${batchId} did not settle`);
}

async function batchCount(): Promise<number> {
  const [row] = await t.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
  return row!.n;
}

/** Each item's golden check by item_key: true passed, false failed. */
async function goldenOf(batchId: string): Promise<Record<string, boolean | undefined>> {
  const page = await ok<ItemPage>(`${batches()}/${batchId}/items?limit=100`);
  return Object.fromEntries(page.items.map((i) => [i.item_key, i.checks?.find((c) => c.name === "golden")?.passed]));
}

const SCHEMA = { type: "object", properties: { label: { type: "string", enum: ["yes", "no"] }, note: { type: "string" } }, required: ["label"] };

describe("runs against a golden set", () => {
  let labels: GoldenSetCreated;
  let texts: GoldenSetCreated;

  beforeAll(async () => {
    // The simulator answers each item's `answer` verbatim ([[json:...]]): a, b agree with the set, c does not.
    labels = await ok<GoldenSetCreated>(
      "/api/golden-sets",
      {
        json: {
          name: "labels",
          items: [
            { item_key: "a", fields: { answer: '{"label":"yes","note":"extra"}' }, expected: { label: "yes" } },
            { item_key: "b", fields: { answer: '{"label":"no"}' }, expected: { label: "no" } },
            { item_key: "c", fields: { answer: '{"label":"no"}' }, expected: { label: "yes" } },
          ],
        },
      },
      201,
    );
    texts = await ok<GoldenSetCreated>(
      "/api/golden-sets",
      {
        json: {
          name: "texts",
          items: [
            { item_key: "one", input: "[[echo]]1", expected: "1" },
            { item_key: "two", input: "[[echo]]2", expected: "3" },
          ],
        },
      },
      201,
    );
  });

  it("runs the set's items, grades each answer against its expected field by field, and records the set and version", async () => {
    const created = await ok<BatchProjection>(
      batches(),
      {
        json: { submission_key: "golden-typed", golden_set: { id: labels.id }, prompt_template: "[[json:{{answer}}]]", output_schema: SCHEMA, review: { when: "all" } },
      },
      201,
    );
    expect(created.total).toBe(3);
    expect(created.golden_set).toEqual({ id: labels.id, version: 1 });
    expect(created.checks.map((c) => c.name)).toEqual(["golden"]);
    const done = await settled(created.id);
    expect(done.checks).toEqual([{ name: "golden", passed: 2, failed: 1, agreement: null }]);
    expect(done.verdicts).toEqual({ passed: 2, failed: 1 });
    // a's answer carries a field the set does not name: only expected's fields are graded.
    expect(await goldenOf(created.id)).toEqual({ a: true, b: true, c: false });
    const page = await ok<ItemPage>(`${batches()}/${created.id}/items?check=golden&check_result=failed`);
    expect(page.items.map((i) => i.item_key)).toEqual(["c"]);
    expect(page.items[0]!.checks?.[0]?.reason).toBe('/label is "no", expected "yes"');

    // The export carries it as any check.
    const jsonl = await http<string>(`${batches()}/${created.id}/results.jsonl`);
    const lines = jsonl.body.trim().split("\n").map((l) => JSON.parse(l) as { item_key: string; checks?: { name: string; passed: boolean }[] });
    expect(lines.map((l) => [l.item_key, l.checks?.map((c) => [c.name, c.passed])])).toEqual([
      ["a", [["golden", true]]],
      ["b", [["golden", true]]],
      ["c", [["golden", false]]],
    ]);

    // Agreement: how often the golden check's pass matches the person's accept (a agrees, c does not).
    const queue = await ok<ReviewPage>(`/api/reviews?batch_id=${created.id}`);
    for (const entry of queue.items.filter((e) => e.item_key === "a" || e.item_key === "c"))
      await ok(`${batches()}/${created.id}/items/${entry.item_id}/review`, { json: { decision: "accept", version: entry.review.version } });
    const reviewed = await ok<BatchProjection>(`${batches()}/${created.id}`);
    expect(reviewed.checks).toEqual([{ name: "golden", passed: 2, failed: 1, agreement: 0.5 }]);
  }, 60_000);

  it("estimates a run against a set as it would be written", async () => {
    const estimate = await ok<{ items: number }>(`${batches()}/estimate`, { json: { submission_key: "golden-estimate", golden_set: { id: texts.id } } });
    expect(estimate.items).toBe(2);
    expect(await refused(`${batches()}/estimate`, { json: { submission_key: "golden-estimate", golden_set: { id: texts.id, version: 5 } } })).toBe(
      "golden_set.version: this set has versions 1 to 1",
    );
  });

  it("keeps a string expected \"1\" the string \"1\" end to end (an untyped answer is compared as text)", async () => {
    const created = await ok<BatchProjection>(batches(), { json: { submission_key: "golden-text", golden_set: { id: texts.id, version: 1 } } }, 201);
    await settled(created.id);
    expect(await goldenOf(created.id)).toEqual({ one: true, two: false });
    const page = await ok<ItemPage>(`${batches()}/${created.id}/items`);
    const one = page.items.find((i) => i.item_key === "one")!;
    expect(one.expected).toBe("1");
    const [row] = await t.sql<{ type: string }[]>`select jsonb_typeof(expected) as type from subagent_batch_items where batch_id = ${created.id} and item_key = 'one'`;
    expect(row!.type).toBe("string");
  }, 60_000);

  it("refuses bad input with a 400 naming the field and writes nothing; another user's set reads as unknown", async () => {
    const before = await batchCount();
    const body = (extra: Record<string, unknown>) => ({ json: { submission_key: `bad-${Math.random()}`, ...extra } });
    expect(await refused(batches(), body({ golden_set: { id: labels.id }, items: ["x"] }))).toMatch(/^golden_set: give either golden_set or items/);
    expect(await refused(batches(), body({ golden_set: { id: "00000000-0000-4000-8000-000000000000" } }))).toBe("golden_set.id: no such golden set");
    expect(await refused(batches(), body({ golden_set: { id: "not-a-uuid" } }))).toBe("golden_set.id: no such golden set");
    expect(await refused(batches(), body({ golden_set: { id: labels.id, version: 2 } }))).toBe("golden_set.version: this set has versions 1 to 1");
    expect(await refused(batches(), body({ golden_set: { id: labels.id, version: 0 } }))).toMatch(/^golden_set\.version: /);
    expect(await refused(batches(), body({ golden_set: { id: labels.id }, prompt_template: "[[json:{{answer}}]]", checks: [{ name: "golden", type: "regex", pattern: "x" }] }))).toMatch(
      /^checks\.0\.name: "golden" is the golden set's own check/,
    );
    // An expected outside the batch's schema: the first item whose expected does not validate.
    expect(
      await refused(batches(), body({ golden_set: { id: labels.id }, prompt_template: "[[json:{{answer}}]]", output_schema: { type: "object", required: ["score"] } })),
    ).toMatch(/^golden_set: item "a": its expected answer does not match the batch's output_schema \(\/ must have required property 'score'\)/);
    // An upload and a golden set together.
    expect(
      await refused(`${batches()}?submission_key=up&golden_set=${encodeURIComponent(JSON.stringify({ id: labels.id }))}`, {
        body: '"x"\n',
        headers: { "content-type": "application/x-ndjson" },
      }),
    ).toMatch(/^golden_set: give either golden_set or an uploaded file/);
    // The stranger's thread and the owner's set: the same words as an unknown set.
    const strangerThread = await t.sql<{ id: string }[]>`insert into threads (user_id, title) values (${stranger.userId}, 's') returning id`;
    expect(
      await refused(`/api/threads/${strangerThread[0]!.id}/subagent-batches`, { ...body({ golden_set: { id: labels.id } }), user: stranger }),
    ).toBe("golden_set.id: no such golden set");
    expect(await batchCount()).toBe(before);
  });

  it("a variant runs on the same set, and the comparison shows which run agrees more with it", async () => {
    const a = await ok<BatchProjection>(
      batches(),
      { json: { submission_key: "golden-cmp-a", golden_set: { id: labels.id }, prompt_template: "[[json:{{answer}}]]", output_schema: SCHEMA } },
      201,
    );
    await settled(a.id);
    const draft = await ok<VariantDraft>(`${batches()}/${a.id}/variant`);
    expect(draft.golden_set).toEqual({ id: labels.id, version: 1 });
    expect(draft.checks).toEqual([]);
    // Every answer "yes": a and c agree with the set, b does not (2 of 3, as the original).
    const b = await ok<BatchProjection>(`${batches()}/${a.id}/variant`, { json: { submission_key: "golden-cmp-b", prompt_template: '[[json:{"label":"yes"}]] {{answer}}' } }, 201);
    expect(b.golden_set).toEqual({ id: labels.id, version: 1 });
    expect(b.variant_of).toBe(a.id);
    await settled(b.id);
    expect(await goldenOf(b.id)).toEqual({ a: true, b: false, c: true });
    const summary = await ok<CompareSummary>(`${batches()}/${a.id}/compare/${b.id}`);
    expect(summary.checks).toEqual([{ name: "golden", a: { passed: 2, failed: 1 }, b: { passed: 2, failed: 1 }, improved: 1, regressed: 1 }]);
    expect(summary.verdicts).toMatchObject({ improved: 1, regressed: 1, both_passed: 1 });
    // Both ran on the same set and version: only the template differs.
    expect(summary.differences.map((d) => d.setting)).toEqual(["prompt_template"]);

    // golden_set: null runs the original's items without the set (and without its check).
    const plain = await ok<BatchProjection>(`${batches()}/${a.id}/variant`, { json: { submission_key: "golden-cmp-c", golden_set: null } }, 201);
    expect(plain.golden_set).toBeNull();
    expect(plain.checks).toEqual([]);
    await settled(plain.id);
    const off = await ok<CompareSummary>(`${batches()}/${a.id}/compare/${plain.id}`);
    expect(off.differences.find((d) => d.setting === "golden_set")).toEqual({ setting: "golden_set", a: `${labels.id} version 1`, b: null });
    expect(await refused(`${batches()}/${a.id}/variant`, { json: { submission_key: "golden-cmp-d", only: { verdict: "failed" } } })).toMatch(/^only: /);
  }, 90_000);

  it("makes and adds to a set from an uploaded CSV or JSONL with an expected column, refusing bad files naming the line", async () => {
    const csv = 'item_key,answer,expected\nx,"{""label"":""yes""}","{""label"":""yes""}"\ny,"{""label"":""no""}",1\n';
    const made = await ok<GoldenSetCreated>("/api/golden-sets", await form({ name: "labels.csv", type: "text/csv", text: csv }, { name: "from csv" }), 201);
    expect(made).toMatchObject({ name: "from csv", version: 1, items: 2 });
    const page = await ok<GoldenItemPage>(`/api/golden-sets/${made.id}/items`);
    expect(page.items).toEqual([
      { item_key: "x", fields: { answer: '{"label":"yes"}' }, expected: { label: "yes" } },
      { item_key: "y", fields: { answer: '{"label":"no"}' }, expected: 1 },
    ]);
    // JSONL: one item a line as the JSON body takes them; an item_key already there takes the newer answer.
    const jsonl = `${JSON.stringify({ item_key: "y", fields: { answer: '{"label":"no"}' }, expected: "1" })}\n\n${JSON.stringify({ item_key: "z", input: "[[echo]]z", expected: "z" })}\n`;
    const added = await ok<GoldenSetAdded>(`/api/golden-sets/${made.id}/add`, await form({ name: "more.jsonl", type: "application/x-ndjson", text: jsonl }));
    expect(added).toEqual({ version: 2, items: 3, added: 1, replaced: 1 });
    const v2 = await ok<GoldenItemPage>(`/api/golden-sets/${made.id}/items?version=2`);
    expect(v2.items.map((i) => [i.item_key, i.expected])).toEqual([["x", { label: "yes" }], ["y", "1"], ["z", "z"]]);

    const [before] = await t.sql<{ n: number }[]>`select count(*)::int as n from golden_set_items`;
    const bad = async (file: { name: string; type: string; text: string }, fields: Record<string, string> = { name: "bad" }) =>
      refused("/api/golden-sets", await form(file, fields));
    expect(await bad({ name: "a.csv", type: "text/csv", text: "item_key,answer\na,1\n" })).toBe("file: the CSV needs an expected column (the right answer of each item)");
    expect(await bad({ name: "a.csv", type: "text/csv", text: "answer,expected\n1,1\n2,\n" })).toBe("line 3: expected: is required");
    expect(await bad({ name: "a.csv", type: "text/csv", text: "answer,expected\n1,1,9\n" })).toBe("line 2: has 3 fields; the header has 2");
    expect(await bad({ name: "a.jsonl", type: "application/x-ndjson", text: '{"input":"a","expected":1}\n{nope\n' })).toBe("line 2: not valid JSON");
    expect(await bad({ name: "a.jsonl", type: "application/x-ndjson", text: '{"input":"a"}\n' })).toBe("line 1: expected: is required");
    expect(await bad({ name: "a.jsonl", type: "application/x-ndjson", text: '{"input":"a","expected":1,"colour":2}\n' })).toMatch(/^line 1: /);
    expect(await bad({ name: "a.txt", type: "text/plain", text: "a" })).toMatch(/^file: send a \.csv or \.jsonl file/);
    expect(await bad({ name: "a.csv", type: "text/csv", text: "answer,expected\n1,1\n" }, { name: "x", from_batch: "y" })).toBe("from_batch: not a field of this upload");
    expect(await bad({ name: "a.csv", type: "text/csv", text: "answer,expected\n1,1\n" }, {})).toMatch(/^name: /);
    const many = ["answer,expected", ...Array.from({ length: GOLDEN_ITEMS_MAX + 1 }, (_, i) => `${i},${i}`)].join("\n");
    expect(await bad({ name: "a.csv", type: "text/csv", text: many })).toBe(`line ${GOLDEN_ITEMS_MAX + 2}: at most ${GOLDEN_ITEMS_MAX} items per request`);
    // Another user's set: 404, nothing added.
    expect((await http(`/api/golden-sets/${made.id}/add`, { ...(await form({ name: "a.csv", type: "text/csv", text: "answer,expected\n1,1\n" })), user: stranger })).status).toBe(404);
    const [after] = await t.sql<{ n: number }[]>`select count(*)::int as n from golden_set_items`;
    expect(after!.n).toBe(before!.n);
  });
});

