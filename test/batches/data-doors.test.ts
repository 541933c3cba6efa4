import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema } from "@/lib/api/batches";
import { submissionLimits, submissionRefusal } from "@/lib/batch-rules";
import { configSchema } from "@/lib/config";
import { createBatchTools } from "@/server/agent/tools/batch";
import { resolveModel } from "@/server/models/index";
import { writeHeartbeat } from "@/server/runtime/heartbeat";
import { putFiles } from "@/server/workspace/files";
import { call, errorOf, makeThread, makeUser, rowCounts, setupApiDatabase, type TestUser } from "../api/helpers";
import type { TestDatabase } from "../helpers/db";

/**
 * Batches that produce data, at every door: object items and {{field}} templates, `expected`
 * stored and kept out of the prompt, CSV uploads (physical line numbers across quoted line
 * breaks), output_schema and checks from JSON, NDJSON and CSV query parameters, files and
 * batch_task; every refusal names its field in the door's terms and writes nothing. Real
 * PostgreSQL, real route handlers.
 */

let tdb: TestDatabase;
let alice: TestUser;
let mallory: TestUser;
const config = configSchema.parse({ simulator: { latency_ms: 1 } });
let seq = 0;
const key = () => `data-${++seq}-${Math.random()}`;

beforeAll(async () => {
  tdb = await setupApiDatabase();
  alice = await makeUser(tdb, "data");
  mallory = await makeUser(tdb, "mallory");
});

afterEach(async () => {
  await tdb.sql`delete from worker_heartbeats`;
});

const submitPath = (threadId: string, query = "") => `/api/threads/${threadId}/subagent-batches${query ? `?${query}` : ""}`;

async function postJson(threadId: string, body: Record<string, unknown>, user = alice): Promise<Response> {
  return call("POST", submitPath(threadId), { token: user.token, json: { submission_key: key(), ...body } });
}

async function postText(threadId: string, body: string, contentType: string, query: Record<string, string> = {}, user = alice) {
  const q = new URLSearchParams({ submission_key: key(), ...query }).toString();
  return call("POST", submitPath(threadId, q), { token: user.token, body, contentType });
}

const postCsv = (threadId: string, body: string, query: Record<string, string> = {}, user = alice) =>
  postText(threadId, body, "text/csv", query, user);
const postNdjson = (threadId: string, lines: unknown[], query: Record<string, string> = {}) =>
  postText(threadId, `${lines.map((l) => JSON.stringify(l)).join("\n")}\n`, "application/x-ndjson", query);

/** batch_task as the lead would call it (a live worker's heartbeat, a lead run). */
async function tool(threadId: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  await writeHeartbeat(tdb.db, { id: "data-worker", capacity: 1, running: 0 });
  const [run] = await tdb.sql<{ id: string }[]>`
    insert into agent_runs (user_id, thread_id, kind, definition, model, status)
    values (${alice.userId}, ${threadId}, 'lead', 'lead', 'simulator', 'running') returning id`;
  const tools = await createBatchTools({
    db: tdb.db,
    config,
    userId: alice.userId,
    threadId,
    runId: run!.id,
    model: resolveModel(config, {}),
    abortSignal: new AbortController().signal,
  });
  return (await tools.batch_task!.execute!(args as never, { toolCallId: `call-${++seq}`, messages: [] })) as Record<string, unknown>;
}

interface StoredItem {
  item_key: string;
  prompt: string;
  input: string;
  expected: unknown;
}

async function storedItems(batchId: string): Promise<StoredItem[]> {
  return tdb.sql<StoredItem[]>`
    select item_key, prompt, input, expected from subagent_batch_items where batch_id = ${batchId} order by position`;
}

async function storedSpec(batchId: string): Promise<{ output_schema: unknown; checks: unknown; input_fields: unknown }> {
  const [row] = await tdb.sql<{ spec: { output_schema: unknown; checks: unknown; input_fields: unknown } }[]>`
    select execution_spec as spec from subagent_batches where id = ${batchId}`;
  const { output_schema, checks, input_fields } = row!.spec;
  return { output_schema, checks, input_fields };
}

async function created(res: Response): Promise<string> {
  if (res.status !== 201) throw new Error(`expected 201, got ${res.status}: ${await res.text()}`);
  return batchProjectionSchema.parse(await res.json()).id;
}

/** The refusal's status and message, and that nothing was written. */
async function refused(send: () => Promise<Response>): Promise<{ status: number; message: string }> {
  const before = await rowCounts(tdb);
  const res = await send();
  const { message } = await errorOf(res);
  expect(await rowCounts(tdb)).toEqual(before);
  return { status: res.status, message };
}

const LABEL_SCHEMA = {
  type: "object",
  properties: { label: { type: "string", enum: ["positive", "negative"] }, score: { type: "number" } },
  required: ["label"],
};

describe("object items", () => {
  it("fill {{field}} from their fields; input is the fields as compact JSON; expected is stored, never in the prompt", async () => {
    const threadId = await makeThread(tdb, alice);
    const batchId = await created(
      await postJson(threadId, {
        prompt_template: "Classify {{title}} (stars: {{stars}}, verified: {{verified}}). Again: {{title}}",
        items: [
          { item_key: "r1", title: "Great kettle", stars: 5, verified: true, expected: { label: "SECRET-POSITIVE" } },
          { title: "Broken lid", stars: 1.5, verified: false, lang: "en" },
        ],
      }),
    );
    const items = await storedItems(batchId);
    expect(items).toEqual([
      {
        item_key: "r1",
        prompt: "Classify Great kettle (stars: 5, verified: true). Again: Great kettle",
        input: '{"title":"Great kettle","stars":5,"verified":true}',
        expected: { label: "SECRET-POSITIVE" },
      },
      {
        item_key: "item-2",
        prompt: "Classify Broken lid (stars: 1.5, verified: false). Again: Broken lid",
        input: '{"title":"Broken lid","stars":1.5,"verified":false,"lang":"en"}',
        expected: null,
      },
    ]);
    expect(items.some((i) => i.prompt.includes("SECRET"))).toBe(false);
    expect((await storedSpec(batchId)).input_fields).toEqual(["title", "stars", "verified", "lang"]);
  });

  it("an object whose only keys are prompt (and item_key) stays an explicit prompt; with expected its prompt field is the prompt", async () => {
    const threadId = await makeThread(tdb, alice);
    const batchId = await created(
      await postJson(threadId, {
        items: [
          { item_key: "p", prompt: "Say hi" },
          { prompt: "What is 2+2?", expected: 4 },
          "plain value",
        ],
      }),
    );
    expect(await storedItems(batchId)).toEqual([
      { item_key: "p", prompt: "Say hi", input: "Say hi", expected: null },
      { item_key: "item-2", prompt: "What is 2+2?", input: '{"prompt":"What is 2+2?"}', expected: 4 },
      { item_key: "item-3", prompt: "plain value", input: "plain value", expected: null },
    ]);
    expect((await storedSpec(batchId)).input_fields).toEqual(["prompt"]);
  });

  it("a field named __proto__ or toString is just a field, and a template naming toString needs the item to have it", async () => {
    const threadId = await makeThread(tdb, alice);
    const body = `{"submission_key":"${key()}","prompt_template":"{{__proto__}} / {{toString}}","items":[{"__proto__":"a","toString":"b"}]}`;
    const res = await call("POST", submitPath(threadId), { token: alice.token, body, contentType: "application/json" });
    const batchId = await created(res);
    expect((await storedItems(batchId))[0]).toMatchObject({ prompt: "a / b", input: '{"__proto__":"a","toString":"b"}' });

    const { message } = await refused(() =>
      postJson(threadId, { prompt_template: "{{name}} {{toString}}", items: [{ name: "x" }] }),
    );
    expect(message).toBe("items.0.toString: the prompt_template names {{toString}} and this item has no such field");
  });

  it("a template naming a field an item lacks is refused naming the item and the field, at every door", async () => {
    const threadId = await makeThread(tdb, alice);
    const items = [{ name: "Ada", age: 36 }, { name: "Bob" }];
    const template = "{{name}} is {{age}}";
    const json = await refused(() => postJson(threadId, { prompt_template: template, items }));
    expect(json).toEqual({ status: 400, message: "items.1.age: the prompt_template names {{age}} and this item has no such field" });
    const nd = await refused(() => postNdjson(threadId, items, { prompt_template: template }));
    expect(nd.message).toBe("line 2: age: the prompt_template names {{age}} and this item has no such field");
    expect(await tool(threadId, { prompt_template: template, items })).toEqual({ error: json.message });
  });

  it("refuses object items without a way to their prompt, and templates that name no field", async () => {
    const threadId = await makeThread(tdb, alice);
    expect((await refused(() => postJson(threadId, { items: [{ name: "Ada" }] }))).message).toBe(
      "items.0: an object item needs a prompt_template naming its fields as {{<field>}} (or a prompt field)",
    );
    expect((await refused(() => postJson(threadId, { items: [{ name: "Ada" }], prompt_template: "Same for all" }))).message).toBe(
      "prompt_template: must contain {{item}} or name the items' fields as {{<field>}}",
    );
    // {{item}} names a field for object items: the item has none by that name.
    expect((await refused(() => postJson(threadId, { items: [{ name: "Ada" }], prompt_template: "Do {{item}}" }))).message).toBe(
      "items.0.item: the prompt_template names {{item}} and this item has no such field",
    );
  });

  it("the dialog's pre-send check gives the writer's refusal, items named by number", () => {
    const limits = submissionLimits(config.subagent_batches);
    const body = { items: [{ name: "Ada", age: 36 }, { name: "Bob" }], prompt_template: "{{name}} is {{age}}" };
    expect(submissionRefusal(body, limits)).toBe("item 2: age: the prompt_template names {{age}} and this item has no such field");
    expect(submissionRefusal({ ...body, items: [{ name: "Bob", age: 1, expected: [1] }] }, limits)).toBeNull();
  });

  it("a 20,000-character template over 5,000 object items: 413 from computed lengths, nothing built", async () => {
    const threadId = await makeThread(tdb, alice);
    const template = `{{v}}${"x".repeat(19_995)}`;
    const items = Array.from({ length: 5000 }, (_, i) => ({ v: `v${i}` }));
    const started = Date.now();
    const got = await refused(() => postJson(threadId, { prompt_template: template, items }));
    expect(got.status).toBe(413);
    expect(got.message).toMatch(/^items: the expanded prompts would total \d+ characters; at most 50000000 per batch/);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("counts every placeholder toward the batch's total even when its value is empty (filling costs a step per placeholder)", () => {
    const limits = { maxItems: 100, maxLiveItems: 10, maxRunningItems: 4, maxTotalPromptChars: 1_000 };
    const template = `x${"{{v}}".repeat(200)}`;
    const empty = Array.from({ length: 10 }, () => ({ v: "" }));
    expect(submissionRefusal({ items: empty, prompt_template: template }, limits)).toBe(
      "items: the expanded prompts would total 2000 characters; at most 1000 per batch (subagent_batches.max_total_prompt_chars)",
    );
    expect(submissionRefusal({ items: empty.slice(0, 4), prompt_template: template }, limits)).toBeNull();
  });

  it("bounds fields, names, values and expected", async () => {
    const threadId = await makeThread(tdb, alice);
    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`f${i}`, i]));
    const cases: [Record<string, unknown>, string][] = [
      [many, "items.0: at most 64 fields per item"],
      [{ ["n".repeat(65)]: 1 }, `items.0: field name "${"n".repeat(40)}…" is longer than 64 characters`],
      [{ "a{b": 1 }, 'items.0: field name "a{b" may not contain braces or control characters'],
      [{ "": 1 }, "items.0: a field name must not be empty"],
      [{ v: [1] }, "items.0.v: must be a string, a number or a boolean"],
      [{ v: null }, "items.0.v: must be a string, a number or a boolean"],
      [{ expected: 1 }, "items.0: an object item needs at least one field besides item_key and expected (or a prompt)"],
      [{ v: "x", expected: "e".repeat(16 * 1024) }, "items.0.expected: must be at most 16384 bytes as JSON"],
      [{ v: "x", expected: "nul\u0000" }, "items.0.expected: must not contain NUL (\\u0000) characters"],
      [{ v: "x", item_key: 7 }, "items.0.item_key: must be a string"],
    ];
    for (const [item, message] of cases) {
      const got = await refused(() => postJson(threadId, { prompt_template: "{{v}}", items: [item] }));
      expect(got).toEqual({ status: 400, message });
    }
  });

  it("an expected nested thousands deep is a 400, not a crash", async () => {
    const threadId = await makeThread(tdb, alice);
    const deep = `${"[".repeat(20_000)}1${"]".repeat(20_000)}`;
    const body = `{"submission_key":"${key()}","prompt_template":"{{v}}","items":[{"v":"x","expected":${deep}}]}`;
    const got = await refused(() => call("POST", submitPath(threadId), { token: alice.token, body, contentType: "application/json" }));
    expect(got).toEqual({ status: 400, message: "items.0.expected: must be nested at most 64 levels deep" });
  });

  it("computes filled lengths from field lengths before building a prompt", async () => {
    const threadId = await makeThread(tdb, alice);
    // 1,000 slots of a 200-character field: 200,000 characters if it were built.
    const template = "{{v}}".repeat(1000);
    const got = await refused(() => postJson(threadId, { prompt_template: template, items: [{ v: "x" }, { v: "y".repeat(200) }] }));
    expect(got).toEqual({ status: 400, message: "items.1: prompt is 200000 characters; at most 100000 per item" });
  });
});

describe("CSV uploads", () => {
  it("map the header to fields, item_key to the key and expected to expected (JSON when it parses)", async () => {
    const threadId = await makeThread(tdb, alice);
    const csv = [
      "\uFEFFitem_key,title,notes,expected",
      'a,Kettle,"boils fast, loud",positive',
      'b,Lid,"line one',
      'line two with ""quotes""",{"label":"negative"}',
      "c,Cup,,",
      "",
    ].join("\r\n");
    const batchId = await created(
      await postCsv(threadId, csv, {
        prompt_template: "Review {{title}}: {{notes}}",
        output_schema: JSON.stringify(LABEL_SCHEMA),
        checks: JSON.stringify([{ name: "label_matches", type: "equals", path: "/label", expected_path: "/label" }]),
      }),
    );
    expect(await storedItems(batchId)).toEqual([
      { item_key: "a", prompt: "Review Kettle: boils fast, loud", input: '{"title":"Kettle","notes":"boils fast, loud"}', expected: "positive" },
      {
        item_key: "b",
        prompt: 'Review Lid: line one\r\nline two with "quotes"',
        input: '{"title":"Lid","notes":"line one\\r\\nline two with \\"quotes\\""}',
        expected: { label: "negative" },
      },
      { item_key: "c", prompt: "Review Cup: ", input: '{"title":"Cup","notes":""}', expected: null },
    ]);
    expect(await storedSpec(batchId)).toEqual({
      output_schema: LABEL_SCHEMA,
      checks: [{ name: "label_matches", type: "equals", path: "/label", expected_path: "/label" }],
      input_fields: ["title", "notes"],
    });
  });

  it("a CSV with only a prompt column is a batch of explicit prompts", async () => {
    const threadId = await makeThread(tdb, alice);
    const batchId = await created(await postCsv(threadId, 'prompt\n"Summarise, briefly"\nSay hi\n'));
    expect((await storedItems(batchId)).map((i) => [i.prompt, i.input])).toEqual([
      ["Summarise, briefly", "Summarise, briefly"],
      ["Say hi", "Say hi"],
    ]);
  });

  it("names the physical line a bad record starts on, counting the lines inside quoted fields", async () => {
    const threadId = await makeThread(tdb, alice);
    // Records: header (line 1), a (lines 2-4), b (line 5), c (line 6, one field short).
    const head = 'item_key,text\na,"one\ntwo\nthree"\nb,ok\n';
    const cases: [string, string][] = [
      [`${head}c\n`, "line 6: has 1 fields; the header has 2"],
      [`${head}c,x,y\n`, "line 6: has 3 fields; the header has 2"],
      [`${head}c,"never closed\nd,e\n`, "line 6: a quoted field is not closed"],
      [`${head}c,"bad"quote\n`, 'line 6: a quoted field is malformed (a quote inside it must be doubled: "")'],
      [`${head}\nc,x\n`, "line 6: empty record (blank lines may only end the file)"],
      [`${head}a,again\n`, 'line 6: duplicate item_key "a" (first used by line 2)'],
      [`${head}"",x\n`, "line 6: item_key: must not be empty"],
      ["item_key,text,text\na,b,c\n", 'line 1: column "text" appears more than once'],
      ["item_key,expected\na,1\n", "line 1: the header needs at least one column besides item_key and expected"],
      ["text,{{x}}\na,b\n", 'line 1: field name "{{x}}" may not contain braces or control characters'],
      ["text,\na,b\n", "line 1: a column has no name"],
      ["text\n", "items: must contain at least one item (a header row, then one record per line)"],
    ];
    for (const [csv, message] of cases) {
      const got = await refused(() => postCsv(threadId, csv, { prompt_template: "{{text}}" }));
      expect(got).toEqual({ status: 400, message });
    }
    // A record whose expected is too large: the item's line and field.
    const big = `text,expected\nok,1\nfine,"${"x".repeat(17_000)}"\n`;
    expect((await refused(() => postCsv(threadId, big, { prompt_template: "{{text}}" }))).message).toBe(
      "line 3: expected: must be at most 16384 bytes as JSON",
    );
  });

  it("counts a lone carriage return as a line break, as old Mac files end their lines", async () => {
    const threadId = await makeThread(tdb, alice);
    const got = await refused(() => postCsv(threadId, 'text\rone\r"two\rlines"\rthree,x\r', { prompt_template: "{{text}}" }));
    expect(got.message).toBe("line 5: has 2 fields; the header has 1");
  });

  it("stops at the first record past the item bound, and is owner-scoped", async () => {
    const threadId = await makeThread(tdb, alice);
    const rows = Array.from({ length: config.subagent_batches.max_items_per_batch + 1 }, (_, i) => `v${i}`);
    const got = await refused(() => postCsv(threadId, `text\n${rows.join("\n")}\n`, { prompt_template: "{{text}}" }));
    expect(got.message).toBe(`line ${rows.length + 1}: at most ${config.subagent_batches.max_items_per_batch} items per batch`);

    const other = await refused(() => postCsv(threadId, "text\na\n", { prompt_template: "{{text}}" }, mallory));
    expect(other.status).toBe(404);
  });
});

describe("output_schema and checks", () => {
  it("arrive as JSON query parameters of an NDJSON upload and are snapshotted into the spec", async () => {
    const threadId = await makeThread(tdb, alice);
    const checks = [
      { name: "has_label", type: "regex", pattern: "^(positive|negative)$", path: "/label", flags: "i" },
      { name: "judged", type: "judge", rubric: "Is the label right?", model: "simulator", threshold: 0.7, on_fail: "retry" },
    ];
    const batchId = await created(
      await postNdjson(threadId, [{ review: "good" }, { review: "bad" }], {
        prompt_template: "Label {{review}}",
        output_schema: JSON.stringify(LABEL_SCHEMA),
        checks: JSON.stringify(checks),
      }),
    );
    expect(await storedSpec(batchId)).toEqual({ output_schema: LABEL_SCHEMA, checks, input_fields: ["review"] });

    const bad = await refused(() => postNdjson(threadId, ["a"], { output_schema: "{not json" }));
    expect(bad).toEqual({ status: 400, message: "output_schema: must be JSON (URL-encoded in the query string)" });
    const badCheck = await refused(() => postNdjson(threadId, ["a"], { checks: JSON.stringify([{ name: "x", type: "regex" }]) }));
    expect(badCheck.message).toMatch(/^checks\.0\.pattern: /);
  });

  it("refuses a schema over 16 KB, one that does not compile, and one nested too deep", async () => {
    const threadId = await makeThread(tdb, alice);
    const base = JSON.stringify({ description: "" }).length;
    const over = { description: "d".repeat(16 * 1024 + 1 - base) };
    expect(JSON.stringify(over).length).toBe(16 * 1024 + 1);
    const big = await refused(() => postJson(threadId, { items: ["a"], output_schema: over }));
    expect(big).toEqual({ status: 400, message: "output_schema: must be at most 16384 bytes as JSON" });
    const exact = { description: "d".repeat(16 * 1024 - base) };
    await created(await postJson(threadId, { items: ["a"], output_schema: exact }));

    const broken = await refused(() => postJson(threadId, { items: ["a"], output_schema: { type: "nope" } }));
    expect(broken.status).toBe(400);
    expect(broken.message).toMatch(/^output_schema: /);
    const notObject = await refused(() => postJson(threadId, { items: ["a"], output_schema: [1] }));
    expect(notObject).toEqual({ status: 400, message: "output_schema: must be a JSON Schema object" });

    const deep = `${'{"not":'.repeat(5000)}{}${"}".repeat(5000)}`;
    const body = `{"submission_key":"${key()}","items":["a"],"output_schema":${deep}}`;
    const nested = await refused(() => call("POST", submitPath(threadId), { token: alice.token, body, contentType: "application/json" }));
    expect(nested).toEqual({ status: 400, message: "output_schema: must be nested at most 64 levels deep" });
  });

  it("accepts a catastrophic-looking pattern (RE2 runs it in linear time) and refuses one RE2 cannot parse", async () => {
    const threadId = await makeThread(tdb, alice);
    await created(await postJson(threadId, { items: ["a"], checks: [{ name: "evil", type: "regex", pattern: "^(a+)+$" }] }));
    for (const pattern of ["(unclosed", "(a)\\1", "(?<=a)b"]) {
      const got = await refused(() => postJson(threadId, { items: ["a"], checks: [{ name: "c", type: "regex", pattern }] }));
      expect(got.status).toBe(400);
      expect(got.message).toMatch(/^checks\.0\.pattern: does not compile \(RE2 syntax\): /);
    }
  });

  it("refuses a path without an output schema, equals without expected, an unknown judge model, duplicate names", async () => {
    const threadId = await makeThread(tdb, alice);
    const regexPath = [{ name: "r", type: "regex", pattern: "x", path: "/label" }];
    expect((await refused(() => postJson(threadId, { items: ["a"], checks: regexPath }))).message).toBe(
      'checks.0.path: points into a JSON answer and the batch has no output_schema (without one, omit path or use "" for the whole answer)',
    );
    // The whole raw answer needs no schema.
    await created(await postJson(threadId, { items: ["a"], checks: [{ name: "r", type: "regex", pattern: "x", path: "" }] }));

    const equals = [{ name: "same", type: "equals", path: "/label" }];
    expect(
      (await refused(() => postJson(threadId, { items: [{ v: "a" }], prompt_template: "{{v}}", output_schema: LABEL_SCHEMA, checks: equals })))
        .message,
    ).toBe("checks.0: an equals check compares with each item's expected, and no item carries expected");
    await created(
      await postJson(threadId, {
        items: [{ v: "a", expected: { label: "positive" } }, { v: "b" }],
        prompt_template: "{{v}}",
        output_schema: LABEL_SCHEMA,
        checks: equals,
      }),
    );

    const judge = [{ name: "j", type: "judge", rubric: "good?", model: "no-such-model" }];
    expect((await refused(() => postJson(threadId, { items: ["a"], checks: judge }))).message).toBe(
      'checks.0.model: unknown model "no-such-model" (not in the model catalog)',
    );
    const twice = [
      { name: "j", type: "judge", rubric: "a" },
      { name: "j", type: "judge", rubric: "b" },
    ];
    expect((await refused(() => postJson(threadId, { items: ["a"], checks: twice }))).message).toBe('checks.1.name: duplicate check name "j"');
    const nul = [{ name: "j", type: "judge", rubric: "a\u0000b" }];
    expect((await refused(() => postJson(threadId, { items: ["a"], checks: nul }))).message).toBe(
      "checks: must not contain NUL (\\u0000) characters",
    );
  });

  it("files batches take them too (equals has no expected there)", async () => {
    const threadId = await makeThread(tdb, alice);
    const limits = { maxFileBytes: 1024 * 1024, maxThreadBytes: 100 * 1024 * 1024, maxStorageBytes: 1024 * 1024 * 1024 };
    await putFiles(tdb.db, { userId: alice.userId, threadId, limits }, [{ path: "r/1.md", bytes: Buffer.from("x"), contentType: "text/plain" }]);
    const checks = [{ name: "has_label", type: "regex", pattern: "positive", path: "/label" }];
    const res = await postJson(threadId, { files: "r/*.md", prompt_template: "Read {{file}}", output_schema: LABEL_SCHEMA, checks });
    expect(await storedSpec(await created(res))).toEqual({ output_schema: LABEL_SCHEMA, checks, input_fields: [] });
    const equals = [{ name: "same", type: "equals", path: "/label" }];
    const got = await refused(() =>
      postJson(threadId, { files: "r/*.md", prompt_template: "Read {{file}}", output_schema: LABEL_SCHEMA, checks: equals }),
    );
    expect(got.message).toBe("checks.0: an equals check compares with each item's expected, and no item carries expected");
  });

  it("batch_task takes output_schema, checks and object items; its refusals name the argument", async () => {
    const threadId = await makeThread(tdb, alice);
    const checks = [{ name: "label_matches", type: "equals", path: "/label" }];
    const receipt = await tool(threadId, {
      items: [
        { item_key: "r1", review: "love it", expected: { label: "positive" } },
        { item_key: "r2", review: "awful", expected: { label: "negative" } },
      ],
      prompt_template: "Label this review: {{review}}",
      output_schema: LABEL_SCHEMA,
      checks,
    });
    expect(receipt).toMatchObject({ created: true, total: 2 });
    const batchId = String(receipt.batch_id);
    expect(await storedSpec(batchId)).toEqual({ output_schema: LABEL_SCHEMA, checks, input_fields: ["review"] });
    expect((await storedItems(batchId)).map((i) => [i.prompt, i.expected])).toEqual([
      ["Label this review: love it", { label: "positive" }],
      ["Label this review: awful", { label: "negative" }],
    ]);

    const before = await rowCounts(tdb);
    expect(await tool(threadId, { items: ["a"], checks: [{ name: "c", type: "regex", pattern: "(x" }] })).toEqual({
      error: expect.stringMatching(/^checks\.0\.pattern: does not compile/),
    });
    expect(await tool(threadId, { items: ["a"], output_schema: { type: 12 } })).toEqual({ error: expect.stringMatching(/^output_schema: /) });
    expect(await rowCounts(tdb)).toEqual(before);
  });
});
