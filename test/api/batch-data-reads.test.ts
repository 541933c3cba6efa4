import Papa from "papaparse";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  batchProjectionSchema,
  batchRetryResponseSchema,
  itemDetailSchema,
  itemPageSchema,
  itemRetryResponseSchema,
  resultLineSchema,
} from "@/lib/api/batches";
import { BATCH_CHANNEL, batchEventPayload } from "@/server/batches/notify";
import { buildExecutionSpec, parseExecutionSpec, specColumns } from "@/server/batches/spec";
import { getConfig } from "@/server/config/load";
import { call, errorOf, itemIdAt, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser, workerAlive } from "./helpers";

/**
 * Batches that produce data, read side, over the routes and a real PostgreSQL: projections of
 * outputs, checks and verdicts, verdict filters, results.csv, and the retry controls. The
 * columns the worker's settlement writes (output, checks, verdict, the per-check and verdict
 * counts) are set here with SQL, as a settlement leaves them.
 */

const tdb = await setupApiDatabase();
let alice: TestUser;
let bob: TestUser;
let thread: string;
let bobThread: string;

beforeAll(async () => {
  alice = await makeUser(tdb, "alice");
  bob = await makeUser(tdb, "bob");
  thread = await makeThread(tdb, alice);
  bobThread = await makeThread(tdb, bob);
});

beforeEach(async () => {
  await workerAlive(tdb);
});

const batchPath = (batchId: string, t = thread) => `/api/threads/${t}/subagent-batches/${batchId}`;

let keySeq = 0;
async function submit(items: unknown[], extra: Record<string, unknown> = {}, user = alice, t = thread) {
  const res = await call("POST", `/api/threads/${t}/subagent-batches`, {
    token: user.token,
    json: { submission_key: `data-${++keySeq}`, items, ...extra },
  });
  expect(res.status, await res.clone().text()).toBe(201);
  return batchProjectionSchema.parse(await res.json());
}

const CHECKS = [
  { name: "label_matches", type: "equals", path: "/label" },
  { name: "has_reason", type: "regex", pattern: "\\w+", path: "/reason" },
  { name: "tone", type: "judge", rubric: "polite" },
];
const SCHEMA = {
  type: "object",
  properties: { label: { type: "string", enum: ["pos", "neg"] }, reason: { type: "string" }, city: { type: "string" }, meta: { type: "object" } },
};

/**
 * The spec fields a typed submission stores (the doors write them; here set directly), with
 * output_fields as buildExecutionSpec derives them: the schema's properties in its order.
 */
async function typed(batchId: string, spec: { output_schema?: typeof SCHEMA; checks?: unknown[]; input_fields?: string[] }): Promise<void> {
  const fields = spec.output_schema ? { output_fields: Object.keys(spec.output_schema.properties) } : {};
  await tdb.sql`update subagent_batches set execution_spec = execution_spec || ${JSON.stringify({ ...spec, ...fields })}::jsonb where id = ${batchId}`;
}

interface Settled {
  status?: "succeeded" | "failed";
  output?: unknown;
  checks?: { name: string; passed: boolean; score?: number; reason?: string }[] | null;
  verdict?: "passed" | "failed" | null;
  result?: string | null;
  error?: string | null;
}

/** One item as a settlement leaves it. */
async function settle(batchId: string, position: number, s: Settled): Promise<void> {
  await tdb.sql`
    update subagent_batch_items
       set status = ${s.status ?? "succeeded"}, attempts = 1,
           output = ${s.output === undefined ? null : JSON.stringify(s.output)}::jsonb,
           checks = ${s.checks ? JSON.stringify(s.checks) : null}::jsonb,
           verdict = ${s.verdict ?? null}, result = ${s.result ?? null}, preview = left(${s.result ?? null}::text, 2000),
           error = ${s.error ?? null}, input_tokens = 1000, output_tokens = 500,
           -- As settle.sql prices an attempt its executor did not price: at the batch's snapshot.
           cost_usd = (select (1000 * price_input_per_million + 500 * price_output_per_million) / 1e6 from subagent_batches where id = ${batchId}),
           started_at = now() - interval '1500 milliseconds', finished_at = now()
     where batch_id = ${batchId} and position = ${position}`;
}

/** The verdict and per-check counts as the settlement's trigger keeps them: recounted from the items. */
async function recount(batchId: string): Promise<void> {
  await tdb.sql`
    update subagent_batches b set
      verdict_passed_count = (select count(*) from subagent_batch_items where batch_id = b.id and verdict = 'passed'),
      verdict_failed_count = (select count(*) from subagent_batch_items where batch_id = b.id and verdict = 'failed')
     where id = ${batchId}`;
  await tdb.sql`delete from subagent_batch_check_counts where batch_id = ${batchId}`;
  await tdb.sql`
    insert into subagent_batch_check_counts (batch_id, name, passed, failed)
    select ${batchId}, c->>'name', count(*) filter (where (c->>'passed')::boolean), count(*) filter (where not (c->>'passed')::boolean)
      from subagent_batch_items it, jsonb_array_elements(it.checks) c
     where it.batch_id = ${batchId}
     group by c->>'name'`;
}

async function getJson(path: string, user = alice): Promise<{ status: number; body: unknown }> {
  const res = await call("GET", path, { token: user.token });
  return { status: res.status, body: await res.json() };
}

const pass = (name: string) => ({ name, passed: true, score: 1 });
const fail = (name: string, reason: string) => ({ name, passed: false, reason });

describe("projections", () => {
  it("carries output, checks and verdict on items; per-check counts, verdicts and the table's columns on the batch", async () => {
    const batch = await submit(["one", "two", "three", "four"], { prompt_template: "Classify {{item}}" });
    await typed(batch.id, { output_schema: SCHEMA, checks: CHECKS, input_fields: ["city", "text"] });
    const out = { label: "pos", reason: "fine", city: "Oslo", meta: { n: 1 } };
    await settle(batch.id, 1, { output: out, checks: [pass("label_matches"), pass("has_reason")], verdict: "passed" });
    await settle(batch.id, 2, {
      output: { ...out, label: "neg" },
      checks: [fail("label_matches", "expected pos"), pass("has_reason")],
      verdict: "failed",
    });
    await settle(batch.id, 3, { status: "failed", error: "invalid_output: /label: must be equal to one of the allowed values" });
    await recount(batch.id);

    const b = batchProjectionSchema.parse((await getJson(batchPath(batch.id))).body);
    // The spec's order; a check no item reached yet ("tone") reads zeros.
    expect(b.checks).toEqual([
      { name: "label_matches", passed: 1, failed: 1 },
      { name: "has_reason", passed: 2, failed: 0 },
      // A judge check carries its agreement with the people who reviewed (null: nobody has).
      { name: "tone", passed: 0, failed: 0, agreement: null },
    ]);
    expect(b.verdicts).toEqual({ passed: 1, failed: 1 });
    expect(b.input_fields).toEqual(["city", "text"]);
    expect(b.output_fields).toEqual(["label", "reason", "city", "meta"]);
    // The list projects the same.
    const list = (await getJson(`/api/threads/${thread}/subagent-batches`)).body as { batches: unknown[] };
    expect(list.batches.map((x) => batchProjectionSchema.parse(x)).find((x) => x.id === batch.id)?.checks).toEqual(b.checks);

    const page = itemPageSchema.parse((await getJson(`${batchPath(batch.id)}/items`)).body);
    expect(page.items.map((i) => [i.output, i.checks, i.verdict])).toEqual([
      [out, [pass("label_matches"), pass("has_reason")], "passed"],
      [{ ...out, label: "neg" }, [fail("label_matches", "expected pos"), pass("has_reason")], "failed"],
      [null, [], null],
      [null, [], null],
    ]);
    const detail = itemDetailSchema.parse((await getJson(`${batchPath(batch.id)}/items/${await itemIdAt(tdb, batch.id, 2)}`)).body);
    expect(detail).toMatchObject({ output: { ...out, label: "neg" }, verdict: "failed" });
    expect(detail.checks[0]).toEqual(fail("label_matches", "expected pos"));
  });

  it("carries each item's expected value and a person's corrected answer (reviewed_output) beside the model's, bounded like output", async () => {
    const cap = getConfig().subagent_batches.result_preview_max_chars;
    const batch = await submit(
      [
        { item_key: "a", text: "one", expected: { label: "pos" } },
        { item_key: "b", text: "two", expected: { label: "x".repeat(cap) } },
        { item_key: "c", text: "three" },
      ],
      { prompt_template: "Classify {{text}}", output_schema: { type: "object", properties: { label: { type: "string" } } } },
    );
    for (const position of [1, 2, 3]) await settle(batch.id, position, { output: { label: "pos" } });
    const a = await itemIdAt(tdb, batch.id, 1);
    const queued = await call("POST", `${batchPath(batch.id)}/items/${a}/review`, { token: alice.token, json: { request: true } });
    expect(queued.status, await queued.clone().text()).toBe(200);
    const { version } = (await queued.json()) as { version: number };
    const decided = await call("POST", `${batchPath(batch.id)}/items/${a}/review`, {
      token: alice.token,
      json: { decision: "accept", version, output: { label: "neg" } },
    });
    expect(decided.status, await decided.clone().text()).toBe(200);

    const page = itemPageSchema.parse((await getJson(`${batchPath(batch.id)}/items`)).body);
    expect(page.items.map((i) => [i.item_key, i.expected, i.output, i.reviewed_output, i.review?.state ?? null, i.review?.corrected ?? null])).toEqual([
      ["a", { label: "pos" }, { label: "pos" }, { label: "neg" }, "accepted", true],
      // An expected value longer than the preview cap is left to the item's detail and the exports.
      ["b", null, { label: "pos" }, null, null, null],
      ["c", null, { label: "pos" }, null, null, null],
    ]);
    const detail = itemDetailSchema.parse((await getJson(`${batchPath(batch.id)}/items/${a}`)).body);
    expect(detail).toMatchObject({ expected: { label: "pos" }, reviewed_output: { label: "neg" } });
    // Another user reads none of it.
    expect((await getJson(`${batchPath(batch.id)}/items`, bob)).status).toBe(404);
  });

  it("prices each item's usage at the batch's snapshot (cost_usd on rows and detail)", async () => {
    const batch = await submit(["a", "b"]);
    await tdb.sql`update subagent_batches set price_input_per_million = 2, price_output_per_million = 10 where id = ${batch.id}`;
    await settle(batch.id, 1, {});
    const page = itemPageSchema.parse((await getJson(`${batchPath(batch.id)}/items`)).body);
    // 1,000 × $2/M + 500 × $10/M = $0.007; the untouched item costs nothing.
    expect(page.items.map((i) => i.cost_usd)).toEqual([expect.closeTo(0.007, 10), 0]);
    const detail = itemDetailSchema.parse((await getJson(`${batchPath(batch.id)}/items/${await itemIdAt(tdb, batch.id, 1)}`)).body);
    expect(detail.cost_usd).toBeCloseTo(0.007, 10);
  });

  it("keeps the output schema's property order in the spec, which jsonb would sort", async () => {
    const spec = buildExecutionSpec({
      userId: alice.userId,
      threadId: thread,
      definition: { name: "general", description: "", systemPrompt: "", toolGroups: [], maxTurns: 1, timeoutMs: 1000 },
      allowedSubagents: ["general"],
      model: { name: "simulator" },
      origin: { kind: "api" },
      outputSchema: { type: "object", properties: { zeta: {}, a: {}, middle: {} } },
      promptTemplate: "T {{item}}",
    });
    const [row] = await tdb.sql<{ spec: Record<string, unknown> }[]>`select ${JSON.stringify(spec)}::jsonb as spec`;
    expect(Object.keys((row!.spec.output_schema as { properties: object }).properties)).toEqual(["a", "zeta", "middle"]);
    expect(specColumns({ executionSpec: row!.spec }).outputFields).toEqual(["zeta", "a", "middle"]);
    expect(parseExecutionSpec(row!.spec).prompt_template).toBe("T {{item}}");
  });

  it("answers a batch without checks or schema with empty lists and zero verdicts", async () => {
    const batch = await submit(["a"]);
    expect(batch).toMatchObject({ checks: [], verdicts: { passed: 0, failed: 0 }, input_fields: [], output_fields: [] });
  });

  it("nulls an output whose compact JSON is longer than result_preview_max_chars, in rows and detail alike", async () => {
    const cap = getConfig().subagent_batches.result_preview_max_chars;
    const batch = await submit(["a", "b", "c", "d"]);
    // Compact: exactly the cap, and one more. jsonb's own text of the array is half as long again
    // as its compact JSON, and it must still be read.
    const atCap = { s: "x".repeat(cap - 8) }; // {"s":"…"} is 8 + n characters
    const overCap = { s: "x".repeat(cap - 7) };
    const ones = Array.from({ length: (cap - 1) / 2 }, () => 1); // [1,1,...]: 2n+1 characters
    expect(JSON.stringify(atCap).length).toBe(cap);
    expect(JSON.stringify(ones).length).toBeLessThanOrEqual(cap);
    await settle(batch.id, 1, { output: atCap });
    await settle(batch.id, 2, { output: overCap });
    await settle(batch.id, 3, { output: ones });
    await settle(batch.id, 4, { output: "é".repeat(cap + 1) });
    const page = itemPageSchema.parse((await getJson(`${batchPath(batch.id)}/items`)).body);
    expect(page.items.map((i) => i.output)).toEqual([atCap, null, ones, null]);
    const detail = itemDetailSchema.parse((await getJson(`${batchPath(batch.id)}/items/${await itemIdAt(tdb, batch.id, 2)}`)).body);
    expect(detail.output).toBeNull();
    // The export carries it whole.
    const lines = (await (await call("GET", `${batchPath(batch.id)}/results.jsonl`, { token: alice.token })).text())
      .trimEnd()
      .split("\n")
      .map((l) => resultLineSchema.parse(JSON.parse(l)));
    expect(lines.map((l) => l.output)).toEqual([atCap, overCap, ones, "é".repeat(cap + 1)]);
  });
});

describe("verdict filter", () => {
  it("pages items by verdict (with status and cursor), and refuses a bad verdict naming it", async () => {
    const batch = await submit(Array.from({ length: 9 }, (_, i) => `v${i + 1}`));
    await typed(batch.id, { checks: CHECKS.slice(0, 1) });
    for (let p = 1; p <= 9; p++) {
      const ok = p % 3 !== 0;
      await settle(batch.id, p, {
        status: p === 9 ? "failed" : "succeeded",
        checks: [ok ? pass("label_matches") : fail("label_matches", "no")],
        verdict: ok ? "passed" : "failed",
      });
    }
    await recount(batch.id);
    const keys = async (query: string) => {
      const out: string[] = [];
      let cursor: string | null = null;
      do {
        const page = itemPageSchema.parse(
          (await getJson(`${batchPath(batch.id)}/items?${query}&limit=2${cursor ? `&cursor=${cursor}` : ""}`)).body,
        );
        out.push(...page.items.map((i) => i.item_key));
        cursor = page.next_cursor;
      } while (cursor);
      return out;
    };
    expect(await keys("verdict=failed")).toEqual(["item-3", "item-6", "item-9"]);
    expect(await keys("verdict=passed")).toEqual(["item-1", "item-2", "item-4", "item-5", "item-7", "item-8"]);
    expect(await keys("verdict=failed&status=succeeded")).toEqual(["item-3", "item-6"]);
    expect(await keys("verdict=failed&status=failed")).toEqual(["item-9"]);

    for (const bad of ["FAILED", "none", "null"]) {
      const res = await call("GET", `${batchPath(batch.id)}/items?verdict=${bad}`, { token: alice.token });
      expect(res.status).toBe(400);
      expect((await errorOf(res)).message).toMatch(/^verdict: /);
    }
    const twice = await call("GET", `${batchPath(batch.id)}/items?verdict=failed&verdict=passed`, { token: alice.token });
    expect(twice.status).toBe(400);
    expect((await errorOf(twice)).message).toMatch(/^verdict: /);
  });

  it("answers an empty page at once for a verdict no item has", async () => {
    const batch = await submit(["a", "b"]);
    const page = itemPageSchema.parse((await getJson(`${batchPath(batch.id)}/items?verdict=failed`)).body);
    expect(page).toEqual({ items: [], next_cursor: null });
  });
});

describe("check and text filters", () => {
  // Out of the user's active batches (quotas.max_active_batches) for the suites after this one.
  afterAll(async () => {
    const active = await tdb.sql<{ id: string }[]>`
      select id from subagent_batches where user_id = ${alice.userId} and thread_id = ${thread} and status in ('queued', 'running', 'paused')`;
    for (const { id } of active) expect((await call("POST", `${batchPath(id)}/cancel`, { token: alice.token })).status).toBe(200);
  });

  const allKeys = async (batchId: string, query: string, limit = 2) => {
    const out: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res = await getJson(`${batchPath(batchId)}/items?${query}&limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const page = itemPageSchema.parse(res.body);
      out.push(...page.items.map((i) => i.item_key));
      cursor = page.next_cursor;
      pages++;
    } while (cursor);
    return { keys: out, pages };
  };

  it("pages items by one check's result (with verdict and status), and searches key, input and answer in any case", async () => {
    const batch = await submit(["Oslo harbour", "Bergen rain", "oslo fjord", "Tromsø lights", "Bodø"]);
    await typed(batch.id, { checks: CHECKS.slice(0, 2) });
    await settle(batch.id, 1, { output: { label: "pos" }, checks: [pass("label_matches"), fail("has_reason", "no reason")], verdict: "failed" });
    await settle(batch.id, 2, { output: { label: "neg", note: "WET" }, checks: [fail("label_matches", "neg"), pass("has_reason")], verdict: "failed" });
    await settle(batch.id, 3, { output: { label: "pos" }, checks: [pass("label_matches"), pass("has_reason")], verdict: "passed" });
    await settle(batch.id, 4, { status: "failed", error: "boom" });
    await settle(batch.id, 5, { result: "A town with a Fjord view", checks: [fail("label_matches", "none"), pass("has_reason")], verdict: "failed" });
    await recount(batch.id);

    expect((await allKeys(batch.id, "check=label_matches&check_result=failed")).keys).toEqual(["item-2", "item-5"]);
    expect((await allKeys(batch.id, "check=label_matches&check_result=passed")).keys).toEqual(["item-1", "item-3"]);
    expect((await allKeys(batch.id, "check=has_reason&check_result=failed")).keys).toEqual(["item-1"]);
    expect((await allKeys(batch.id, "check=has_reason&check_result=passed&verdict=failed")).keys).toEqual(["item-2", "item-5"]);
    // Text: the input, the answer's preview, the output's JSON, the key; any case; with the other filters.
    expect((await allKeys(batch.id, "q=OSLO")).keys).toEqual(["item-1", "item-3"]);
    expect((await allKeys(batch.id, "q=fjord")).keys).toEqual(["item-3", "item-5"]);
    expect((await allKeys(batch.id, "q=wet")).keys).toEqual(["item-2"]);
    expect((await allKeys(batch.id, "q=item-4")).keys).toEqual(["item-4"]);
    expect((await allKeys(batch.id, `q=${encodeURIComponent("tromsø")}`)).keys).toEqual(["item-4"]);
    expect((await allKeys(batch.id, "q=oslo&check=label_matches&check_result=passed&verdict=passed")).keys).toEqual(["item-3"]);
    expect((await allKeys(batch.id, "q=100%25")).keys).toEqual([]);
  });

  it("refuses a bad check filter or search naming the field, and another user's batch", async () => {
    const batch = await submit(["a"]);
    await typed(batch.id, { checks: CHECKS.slice(0, 1) });
    for (const [query, field] of [
      ["check=label_matches", "check_result"],
      ["check=label_matches&check_result=FAILED", "check_result"],
      ["check_result=passed", "check"],
      ["check=nope&check_result=passed", "check"],
      [`q=${"x".repeat(201)}`, "q"],
      ["q=a%00b", "q"],
      ["check=label_matches&check=x&check_result=passed", "check"],
    ] as const) {
      const res = await call("GET", `${batchPath(batch.id)}/items?${query}`, { token: alice.token });
      expect(res.status, query).toBe(400);
      expect((await errorOf(res)).message, query).toMatch(new RegExp(`^${field}: `));
    }
    const other = await call("GET", `${batchPath(batch.id)}/items?check=label_matches&check_result=passed&q=a`, { token: bob.token });
    expect(other.status).toBe(404);
  });

  it("walks at most UNINDEXED_WALK_ROWS rows a page: a rare match past them comes on a later page, the empty ones carrying a cursor", async () => {
    const batch = await submit(Array.from({ length: 2_100 }, (_, n) => (n === 2_049 ? "the needle" : `hay ${n}`)));
    const { keys, pages } = await allKeys(batch.id, "q=needle", 50);
    expect(keys).toEqual(["item-2050"]);
    // 2,100 rows at 2,000 a walk: the first page reads 2,000 rows and finds nothing, the second finds it.
    expect(pages).toBe(2);
    const first = itemPageSchema.parse((await getJson(`${batchPath(batch.id)}/items?q=needle&limit=50`)).body);
    expect(first.items).toEqual([]);
    expect(first.next_cursor).not.toBeNull();
  });
});

describe("results.csv", () => {
  async function csv(batchId: string, user = alice) {
    const res = await call("GET", `${batchPath(batchId)}/results.csv`, { token: user.token });
    return res;
  }

  it("writes a header row and one RFC 4180 row per item: fields, output properties (output.-prefixed on a clash), checks, verdict, usage", async () => {
    // Object items, submitted as such: the input is the fields as compact JSON, the spec names them.
    const inputs = [
      { city: 'Bergen, "rainy"', text: "line one\nline two" },
      { city: "Zürich ✓ 中文 😀", text: "=1+2" },
      { city: "", text: 'He said "hi", then\r\nleft' },
    ];
    const batch = await submit(
      inputs.map((fields, i) => ({ ...fields, expected: { label: i ? "neg" : "pos" } })),
      { prompt_template: "Weather in {{city}}: {{text}}", output_schema: SCHEMA, checks: CHECKS },
    );
    expect(batch).toMatchObject({ input_fields: ["city", "text"], output_fields: ["label", "reason", "city", "meta"] });
    await tdb.sql`update subagent_batches set price_input_per_million = 2, price_output_per_million = 10 where id = ${batch.id}`;
    await settle(batch.id, 1, {
      output: { label: "pos", reason: 'a "quoted", reason\nover lines', city: "Bergen", meta: { n: [1, { a: "b" }] } },
      checks: [pass("label_matches"), fail("has_reason", "none"), pass("tone")],
      verdict: "failed",
    });
    await settle(batch.id, 2, { status: "failed", error: 'invalid_output: /label: "x", not allowed' });

    const res = await csv(batch.id);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/csv; charset=utf-8/);
    const name = `batch-${batch.id}-results.csv`;
    expect(res.headers.get("content-disposition")).toBe(`attachment; filename="${name}"; filename*=UTF-8''${name}`);
    // A byte order mark first, so a spreadsheet reads UTF-8 (Zürich, not ZÃ¼rich); a raw file has none.
    // Read as bytes: Response.text() drops a BOM, as the tests below do.
    const bytes = Buffer.from(await res.arrayBuffer());
    expect([...bytes.subarray(0, 4)]).toEqual([0xef, 0xbb, 0xbf, 0x22]);
    const text = bytes.toString("utf8").slice(1);
    expect(text.endsWith("\r\n")).toBe(true);
    const parsed = Papa.parse<string[]>(text, { skipEmptyLines: true });
    expect(parsed.errors).toEqual([]);
    const [header, ...rows] = parsed.data;
    expect(header).toEqual([
      "item_key",
      "status",
      "city",
      "text",
      "expected",
      "label",
      "reason",
      "output.city",
      "meta",
      "label_matches",
      "has_reason",
      "tone",
      "verdict",
      "attempts",
      "input_tokens",
      "output_tokens",
      "cached_input_tokens",
      "cache_write_tokens",
      "cost_usd",
      "duration_ms",
      "error",
      "review_state",
      "review_note",
      // A person's corrected answer split as the model's is.
      "reviewed_output.label",
      "reviewed_output.reason",
      "reviewed_output.city",
      "reviewed_output.meta",
    ]);
    expect(rows).toHaveLength(3);
    const cell = (row: string[], name: string) => row[header!.indexOf(name)];
    const [r1, r2, r3] = rows as [string[], string[], string[]];
    expect([cell(r1, "item_key"), cell(r1, "status"), cell(r1, "city"), cell(r1, "text")]).toEqual([
      "item-1",
      "succeeded",
      'Bergen, "rainy"',
      "line one\nline two",
    ]);
    expect(cell(r1, "expected")).toBe('{"label":"pos"}');
    expect([cell(r1, "label"), cell(r1, "reason"), cell(r1, "output.city"), cell(r1, "meta")]).toEqual([
      "pos",
      'a "quoted", reason\nover lines',
      "Bergen",
      '{"n":[1,{"a":"b"}]}',
    ]);
    expect([cell(r1, "label_matches"), cell(r1, "has_reason"), cell(r1, "tone"), cell(r1, "verdict")]).toEqual([
      "passed",
      "failed",
      "passed",
      "failed",
    ]);
    expect([cell(r1, "attempts"), cell(r1, "input_tokens"), cell(r1, "output_tokens"), cell(r1, "error")]).toEqual(["1", "1000", "500", ""]);
    expect(Number(cell(r1, "cost_usd"))).toBeCloseTo((1000 * 2 + 500 * 10) / 1e6, 12);
    expect(Number(cell(r1, "duration_ms"))).toBeGreaterThanOrEqual(1400);
    // Unicode verbatim, a leading "=" guarded for a spreadsheet; a failed item's error; empty check cells.
    expect([cell(r2, "city"), cell(r2, "text"), cell(r2, "status"), cell(r2, "error")]).toEqual([
      "Zürich ✓ 中文 😀",
      "'=1+2",
      "failed",
      'invalid_output: /label: "x", not allowed',
    ]);
    expect([cell(r2, "label"), cell(r2, "label_matches"), cell(r2, "verdict")]).toEqual(["", "", ""]);
    // An unfinished item: its input, the rest empty.
    expect([cell(r3, "status"), cell(r3, "text"), cell(r3, "duration_ms"), cell(r3, "cost_usd")]).toEqual([
      "queued",
      'He said "hi", then\r\nleft',
      "",
      "0",
    ]);
    // Text cells are quoted, so a cell starting with = stays one quoted cell, and it is shown as text.
    expect(text).toContain(`,"'=1+2",`);
    // ?raw=1: the same cell verbatim.
    const raw = Buffer.from(await (await call("GET", `${batchPath(batch.id)}/results.csv?raw=1`, { token: alice.token })).arrayBuffer()).toString("utf8");
    expect(raw).toContain(',"=1+2",');
    expect(raw.startsWith('"item_key",')).toBe(true);
    expect(raw.replace(',"=1+2",', "")).toBe(text.replace(`,"'=1+2",`, ""));
  });

  it("writes one input and one result column for string items without a schema", async () => {
    const batch = await submit(["plain", 'with "quotes", commas'], { prompt_template: "Say {{item}}" });
    await settle(batch.id, 2, { result: "answer,\n\"two\"" });
    const parsed = Papa.parse<string[]>(await (await csv(batch.id)).text(), { skipEmptyLines: true });
    expect(parsed.errors).toEqual([]);
    expect(parsed.data[0]).toEqual([
      "item_key",
      "status",
      "input",
      "result",
      "verdict",
      "attempts",
      "input_tokens",
      "output_tokens",
      "cached_input_tokens",
      "cache_write_tokens",
      "cost_usd",
      "duration_ms",
      "error",
      "review_state",
      "review_note",
      "reviewed_output",
    ]);
    expect(parsed.data.slice(1).map((r) => [r[2], r[3]])).toEqual([
      ["plain", ""],
      ['with "quotes", commas', 'answer,\n"two"'],
    ]);
  });

  it("streams a batch larger than one page, in position order", async () => {
    const n = 150;
    const batch = await submit(Array.from({ length: n }, (_, i) => `row ${i + 1}`));
    await tdb.sql`update subagent_batch_items set status = 'succeeded', result = repeat('r', 3000) where batch_id = ${batch.id}`;
    const parsed = Papa.parse<string[]>(await (await csv(batch.id)).text(), { skipEmptyLines: true });
    expect(parsed.data.slice(1).map((r) => r[2])).toEqual(Array.from({ length: n }, (_, i) => `row ${i + 1}`));
  });

  it("writes a column for each of the most output properties a 16 KB schema can name", async () => {
    // Never integer-like: JavaScript orders such keys first, whatever the schema's order.
    const names = Array.from({ length: 1_700 }, (_, i) => `_${i.toString(36)}`);
    const batch = await submit(["a"], {
      output_schema: { type: "object", properties: Object.fromEntries(names.map((n) => [n, {}])) },
    });
    expect(batch.output_fields).toEqual(names);
    await settle(batch.id, 1, { output: Object.fromEntries(names.map((n, i) => [n, i])) });
    const res = await csv(batch.id);
    expect(res.status).toBe(200);
    const [header, row] = Papa.parse<string[]>(await res.text(), { skipEmptyLines: true }).data as [string[], string[]];
    expect(header.slice(3, 1_703)).toEqual(names);
    expect(row.slice(3, 1_703)).toEqual(names.map((_, i) => String(i)));
  });

  it("is 404 for another user's batch", async () => {
    const batch = await submit(["a"]);
    const res = await call("GET", `${batchPath(batch.id, bobThread)}/results.csv`, { token: bob.token });
    expect(res.status).toBe(404);
    const direct = await call("GET", `${batchPath(batch.id)}/results.csv`, { token: bob.token });
    expect(direct.status).toBe(404);
  });
});

describe("batch retry", () => {
  const retry = (batchId: string, json: unknown, user = alice, t = thread) =>
    call("POST", `${batchPath(batchId, t)}/retry`, { token: user.token, json });

  async function statuses(batchId: string): Promise<string[]> {
    const rows = await tdb.sql<{ status: string }[]>`select status from subagent_batch_items where batch_id = ${batchId} order by position`;
    return rows.map((r) => r.status);
  }

  /** Six finished items: 1 passed, 2 failed label, 3 failed reason, 4 failed status, 5 passed, 6 failed label + reason. */
  async function finished(extra: Record<string, unknown> = {}) {
    const batch = await submit(["a", "b", "c", "d", "e", "f"], extra);
    await typed(batch.id, { checks: CHECKS.slice(0, 2) });
    const both = [pass("label_matches"), pass("has_reason")];
    await settle(batch.id, 1, { checks: both, verdict: "passed", output: { label: "pos" }, result: "{}" });
    await settle(batch.id, 2, { checks: [fail("label_matches", "no"), pass("has_reason")], verdict: "failed", output: { label: "neg" } });
    await settle(batch.id, 3, { checks: [pass("label_matches"), fail("has_reason", "no")], verdict: "failed" });
    await settle(batch.id, 4, { status: "failed", error: "boom" });
    await settle(batch.id, 5, { checks: both, verdict: "passed" });
    await settle(batch.id, 6, { checks: [fail("label_matches", "no"), fail("has_reason", "no")], verdict: "failed" });
    await recount(batch.id);
    const b = batchProjectionSchema.parse((await getJson(batchPath(batch.id))).body);
    expect(b.status).toBe("completed");
    return b;
  }

  it("re-queues the items that failed a named check, clearing their answers, and reopens the batch", async () => {
    const batch = await finished();
    const res = await retry(batch.id, { check: "label_matches" });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(batchRetryResponseSchema.parse(await res.json())).toEqual({ retried: 2 });
    expect(await statuses(batch.id)).toEqual(["succeeded", "queued", "succeeded", "failed", "succeeded", "queued"]);
    const [row] = await tdb.sql<{ output: unknown; checks: unknown; verdict: string | null; attempts: number; error: string | null }[]>`
      select output, checks, verdict, attempts, error from subagent_batch_items where batch_id = ${batch.id} and position = 2`;
    expect(row).toEqual({ output: null, checks: null, verdict: null, attempts: 0, error: null });
    const b = batchProjectionSchema.parse((await getJson(batchPath(batch.id))).body);
    expect(b).toMatchObject({ status: "running", finished_at: null, counts: { queued: 2, succeeded: 3, failed: 1 } });
    // The counters trigger takes the cleared verdicts and checks away.
    expect(b.verdicts).toEqual({ passed: 2, failed: 1 });
    expect(b.checks).toEqual([
      { name: "label_matches", passed: 3, failed: 0 },
      { name: "has_reason", passed: 2, failed: 1 },
    ]);
  });

  it("selects by failed verdict, by status, and by both at once", async () => {
    const byVerdict = await finished();
    expect(await (await retry(byVerdict.id, { verdict: "failed" })).json()).toEqual({ retried: 3 });
    expect(await statuses(byVerdict.id)).toEqual(["succeeded", "queued", "queued", "failed", "succeeded", "queued"]);

    const byStatus = await finished();
    expect(await (await retry(byStatus.id, { status: ["failed"] })).json()).toEqual({ retried: 1 });
    expect(await statuses(byStatus.id)).toEqual(["succeeded", "succeeded", "succeeded", "queued", "succeeded", "succeeded"]);

    const both = await finished();
    expect(await (await retry(both.id, { status: ["succeeded"], verdict: "failed", check: "has_reason" })).json()).toEqual({ retried: 2 });
    expect(await statuses(both.id)).toEqual(["succeeded", "succeeded", "queued", "failed", "succeeded", "queued"]);

    const all = await finished();
    expect(await (await retry(all.id, { status: ["succeeded", "failed"] })).json()).toEqual({ retried: 6 });
  });

  it("respects the live window: items beyond it wait as pending", async () => {
    const batch = await finished({ max_live_items: 2 });
    // One item still live elsewhere in the window.
    const extra = await submit(["g"], { max_live_items: 2 });
    expect(extra.status).toBe("queued");
    await tdb.sql`update subagent_batch_items set status = 'running' where batch_id = ${batch.id} and position = 1`;
    expect(await (await retry(batch.id, { status: ["succeeded", "failed"] })).json()).toEqual({ retried: 5 });
    // Room for one (max_live_items 2, one running): the first match queued, the rest pending.
    expect(await statuses(batch.id)).toEqual(["running", "queued", "pending", "pending", "pending", "pending"]);
    const b = batchProjectionSchema.parse((await getJson(batchPath(batch.id))).body);
    expect(b.counts).toMatchObject({ running: 1, queued: 1, pending: 4, succeeded: 0, failed: 0 });
    expect(b.live).toBe(2);
  });

  it("wakes the workers when something moved, and not when nothing did", async () => {
    const batch = await finished();
    const heard: string[] = [];
    const listener = await tdb.sql.listen(BATCH_CHANNEL, (payload) => heard.push(payload));
    try {
      expect(await (await retry(batch.id, { status: ["cancelled"] })).json()).toEqual({ retried: 0 });
      expect(await (await retry(batch.id, { status: ["failed"] })).json()).toEqual({ retried: 1 });
      await expect.poll(() => heard, { timeout: 5_000 }).toContain(batchEventPayload("retry", batch.id));
      expect(heard.filter((p) => p.endsWith(batch.id))).toEqual([batchEventPayload("retry", batch.id)]);
    } finally {
      await listener.unlisten();
    }
  });

  it("answers { retried: 0 } when nothing matches, changing nothing", async () => {
    const batch = await finished();
    const before = await rowCounts(tdb);
    expect(await (await retry(batch.id, { status: ["cancelled"] })).json()).toEqual({ retried: 0 });
    expect(await rowCounts(tdb)).toEqual(before);
    expect(batchProjectionSchema.parse((await getJson(batchPath(batch.id))).body).status).toBe("completed");
  });

  it("refuses a bad body naming the field, a cancelled batch with 409, and another user's batch with 404, writing nothing", async () => {
    const batch = await finished();
    const cases: [unknown, RegExp][] = [
      [{ check: "nope" }, /^check: this batch has no check named "nope"/],
      [{ verdict: "passed" }, /^verdict: /],
      [{ status: ["running"] }, /^status\.0: /],
      [{ status: [] }, /^status: /],
      [{ status: ["failed", "failed"] }, /^status: /],
      [{ status: "failed" }, /^status: /],
      [{}, /status, verdict or check: give at least one/],
      [{ check: "label_matches", extra: 1 }, /extra/],
    ];
    for (const [body, message] of cases) {
      const before = await rowCounts(tdb);
      const res = await retry(batch.id, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await errorOf(res)).message, JSON.stringify(body)).toMatch(message);
      expect(await rowCounts(tdb)).toEqual(before);
    }

    const cancelled = await submit(["a", "b"]);
    await call("POST", `${batchPath(cancelled.id)}/cancel`, { token: alice.token });
    const before = await rowCounts(tdb);
    const res = await retry(cancelled.id, { status: ["cancelled"] });
    expect(res.status).toBe(409);
    expect((await errorOf(res)).message).toMatch(/cancelled/);

    expect((await retry(batch.id, { verdict: "failed" }, bob, bobThread)).status).toBe(404);
    expect((await retry(batch.id, { verdict: "failed" }, bob)).status).toBe(404);
    expect(await rowCounts(tdb)).toEqual(before);
  });
});

describe("item retry with a corrected input", () => {
  const retryItem = (batchId: string, itemId: string, json?: unknown, user = alice) =>
    call("POST", `${batchPath(batchId)}/items/${itemId}/retry`, { token: user.token, ...(json === undefined ? {} : { json }) });

  async function prompt(batchId: string, position: number) {
    const [row] = await tdb.sql<{ prompt: string; input: string; status: string; attempts: number }[]>`
      select prompt, input, status, attempts from subagent_batch_items where batch_id = ${batchId} and position = ${position}`;
    return row!;
  }

  it("rebuilds the prompt from the batch's template, keeps the old attempts, and answers the item and batch", async () => {
    const batch = await submit(["Paris", { item_key: "own", prompt: "explicit prompt" }], { prompt_template: "Weather in {{item}}?" });
    await settle(batch.id, 1, { status: "failed", error: "bad city" });
    await settle(batch.id, 2, { checks: [fail("label_matches", "no")], verdict: "failed" });
    const itemId = await itemIdAt(tdb, batch.id, 1);
    await tdb.sql`insert into subagent_batch_item_attempts (item_id, batch_id, attempt, worker_id, outcome, error)
                  values (${itemId}, ${batch.id}, 1, 'w', 'failed', 'bad city')`;

    const res = await retryItem(batch.id, itemId, { input: "Lyon" });
    expect(res.status, await res.clone().text()).toBe(200);
    const body = itemRetryResponseSchema.parse(await res.json());
    expect(body.item).toMatchObject({ input: "Lyon", status: "queued", attempts: 0, error: null, output: null, verdict: null });
    expect(body.batch.status).toBe("running");
    expect(await prompt(batch.id, 1)).toMatchObject({ prompt: "Weather in Lyon?", input: "Lyon" });
    const [attempts] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batch_item_attempts where item_id = ${itemId}`;
    expect(attempts!.n).toBe(1);

    // An explicit prompt is the prompt; a succeeded item with a failed verdict may be retried.
    const second = await itemIdAt(tdb, batch.id, 2);
    const res2 = await retryItem(batch.id, second, { input: { item_key: "own", prompt: "a better prompt" } });
    expect(res2.status, await res2.clone().text()).toBe(200);
    expect(await prompt(batch.id, 2)).toMatchObject({ prompt: "a better prompt", input: "a better prompt", status: "queued" });
  });

  it("rebuilds an object item's prompt from its corrected fields and replaces its expected value", async () => {
    const batch = await submit([{ item_key: "r1", city: "Pariss", n: 2, expected: { label: "pos" } }], {
      prompt_template: "Weather in {{city}} for {{n}} days",
    });
    await settle(batch.id, 1, { checks: [fail("label_matches", "no")], verdict: "failed" });
    const itemId = await itemIdAt(tdb, batch.id, 1);
    const res = await retryItem(batch.id, itemId, { input: { item_key: "r1", city: "Paris", n: 3, expected: { label: "neg" } } });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(itemRetryResponseSchema.parse(await res.json()).item.input).toBe('{"city":"Paris","n":3}');
    const [row] = await tdb.sql<{ prompt: string; input: string; expected: unknown }[]>`
      select prompt, input, expected from subagent_batch_items where id = ${itemId}`;
    expect(row).toEqual({ prompt: "Weather in Paris for 3 days", input: '{"city":"Paris","n":3}', expected: { label: "neg" } });
    // A field the template names is required, as at submission.
    await settle(batch.id, 1, { status: "failed", error: "x" });
    const missing = await retryItem(batch.id, itemId, { input: { city: "Rome" } });
    expect(missing.status).toBe(400);
    expect((await errorOf(missing)).message).toMatch(/^input\.n: the prompt_template names \{\{n\}\}/);
  });

  it("retries a succeeded item only with a corrected input; without one, only a failed item or a failed verdict", async () => {
    const batch = await submit(["a", "b"]);
    await settle(batch.id, 1, {});
    await settle(batch.id, 2, {});
    const first = await itemIdAt(tdb, batch.id, 1);
    const res = await retryItem(batch.id, first);
    expect(res.status).toBe(409);
    expect((await errorOf(res)).message).toMatch(/succeeded/);
    // Without a template, the string is the prompt (as it was at submission).
    const ok = await retryItem(batch.id, first, { input: "a, corrected" });
    expect(ok.status, await ok.clone().text()).toBe(200);
    expect(await prompt(batch.id, 1)).toMatchObject({ prompt: "a, corrected", input: "a, corrected", status: "queued" });
    // Unfinished now: 409.
    const again = await retryItem(batch.id, first, { input: "x" });
    expect(again.status).toBe(409);
    expect((await errorOf(again)).message).toMatch(/queued/);
  });

  it("checks the corrected input like a submission item, naming input, and writes nothing on a refusal", async () => {
    const batch = await submit(["a"], { prompt_template: "Do {{item}}" });
    await settle(batch.id, 1, { status: "failed", error: "x" });
    const itemId = await itemIdAt(tdb, batch.id, 1);
    const cases: [unknown, number, RegExp][] = [
      ["", 400, /^input: must not be empty/],
      [42, 400, /^input: /],
      [{ prompt: "" }, 400, /^input\.prompt: must not be empty/],
      [{ prompt: 1 }, 400, /^input\.prompt: must be a string/],
      [{ item_key: "other", prompt: "p" }, 400, /^input\.item_key: must be this item's key "item-1"/],
      // An object other than { item_key?, prompt } is an item of fields, which this template cannot fill.
      [{ prompt: "p", extra: true }, 400, /^input\.item: the prompt_template names \{\{item\}\} and this item has no such field/],
      ["x".repeat(100_000), 400, /^input: prompt is 100003 characters; at most 100000/],
    ];
    for (const [input, status, message] of cases) {
      const before = await rowCounts(tdb);
      const res = await retryItem(batch.id, itemId, { input });
      expect(res.status, String(input).slice(0, 40)).toBe(status);
      expect((await errorOf(res)).message, String(input).slice(0, 40)).toMatch(message);
      expect(await rowCounts(tdb)).toEqual(before);
    }
    const bad = await retryItem(batch.id, itemId, { input: "a", other: 1 });
    expect(bad.status).toBe(400);
  });

  it("refuses a string for an item whose prompt no kept template can rebuild", async () => {
    const batch = await submit(["a"], { prompt_template: "Do {{item}}" });
    // A batch older than the spec's prompt_template.
    await tdb.sql`update subagent_batches set execution_spec = execution_spec - 'prompt_template' where id = ${batch.id}`;
    await settle(batch.id, 1, { status: "failed", error: "x" });
    const itemId = await itemIdAt(tdb, batch.id, 1);
    const res = await retryItem(batch.id, itemId, { input: "b" });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).message).toMatch(/^input: this batch kept no prompt template/);
    const ok = await retryItem(batch.id, itemId, { input: { prompt: "Do b" } });
    expect(ok.status).toBe(200);
  });

  it("gives each item whole in its detail as editable_input, which sent back unchanged rebuilds the same prompt, input and expected", async () => {
    const long = `Paris ${"and its suburbs ".repeat(30)}`;
    const cases: [unknown[], Record<string, unknown>, unknown[]][] = [
      [[long, { item_key: "own", prompt: "explicit prompt" }], { prompt_template: "Weather in {{item}}?" }, [long, { prompt: "explicit prompt" }]],
      [
        [{ city: "Lyon", n: 2, expected: { label: "pos" } }, { city: "Nice", n: 1 }],
        { prompt_template: "Weather in {{city}} for {{n}} days" },
        [{ city: "Lyon", n: 2, expected: { label: "pos" } }, { city: "Nice", n: 1 }],
      ],
      [["just the prompt"], {}, ["just the prompt"]],
    ];
    for (const [items, extra, editables] of cases) {
      const batch = await submit(items, extra);
      for (const [i, editable] of editables.entries()) {
        await settle(batch.id, i + 1, { status: "failed", error: "x" });
        const itemId = await itemIdAt(tdb, batch.id, i + 1);
        const detail = itemDetailSchema.parse((await getJson(`${batchPath(batch.id)}/items/${itemId}`)).body);
        expect(detail.editable_input).toEqual(editable);
        const row = () => tdb.sql<{ prompt: string; input: string; expected: unknown }[]>`select prompt, input, expected from subagent_batch_items where id = ${itemId}`;
        const [before] = await row();
        const res = await retryItem(batch.id, itemId, { input: detail.editable_input });
        expect(res.status, await res.clone().text()).toBe(200);
        expect((await row())[0]).toEqual(before);
      }
      // Out of the user's active batches again (quotas.max_active_batches) before the next one.
      expect((await call("POST", `${batchPath(batch.id)}/cancel`, { token: alice.token })).status).toBe(200);
    }
  });

  it("is 404 for another user", async () => {
    const batch = await submit(["a"]);
    await settle(batch.id, 1, { status: "failed", error: "x" });
    const itemId = await itemIdAt(tdb, batch.id, 1);
    const before = await rowCounts(tdb);
    expect((await retryItem(batch.id, itemId, { input: "b" }, bob)).status).toBe(404);
    const other = await call("POST", `${batchPath(batch.id, bobThread)}/items/${itemId}/retry`, { token: bob.token, json: { input: "b" } });
    expect(other.status).toBe(404);
    expect(await rowCounts(tdb)).toEqual(before);
  });
});
