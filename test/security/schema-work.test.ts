import type { ChildProcess } from "node:child_process";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FILE_MAX_SCHEMAS } from "@/server/compat/requests";
import { countLiveWorkers } from "@/server/runtime/heartbeat";
import { PATTERN_CACHE_BYTES, patternCacheStats, testPattern } from "@/server/runtime/pattern-cache";
import { MATCH_TIME_LIMIT_MS, VALIDATION_RETRY_LIMIT_MS, WALL_FACTOR } from "@/server/runtime/pattern-thread";
import { SCHEMA_MAX_EVALUATIONS } from "@/server/runtime/schema-work";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { chatLine, jsonl, spawnWorker, stopWorker, until } from "../compat/support";
import type { TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * Output schemas under abuse, fourth round (issue 38), black-box over real sockets with a real
 * worker process: a schema whose `$ref` / `allOf` fan-out multiplies into millions of pattern
 * evaluations is refused at submission naming `output_schema` (and as a `/v1` response_format,
 * naming its line); a schema within every budget that is still slow on a long answer fails only
 * that item, with `invalid_output`, within the time limit, while the same batch's other item and
 * another user's batch finish and the worker keeps its heartbeat; a `/v1` file with more
 * distinct schemas than its budget is refused naming the first line over it.
 */

let tdb: TestDatabase;
let server: WebServer;
let alice: TestUser;
let bob: TestUser;
let aliceThread: string;
let bobThread: string;
let worker: ChildProcess | undefined;
let seq = 0;

beforeAll(async () => {
  tdb = await setupApiDatabase();
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches", "/v1/"] });
  alice = await makeUser(tdb, "schema-alice");
  bob = await makeUser(tdb, "schema-bob");
  aliceThread = await makeThread(tdb, alice);
  bobThread = await makeThread(tdb, bob);
  worker = spawnWorker(tdb);
  // The route's first request loads its modules: not what the timings below measure.
  expect((await submit(alice, aliceThread, { items: ["warm-up"], output_schema: { type: "object" } })).status).toBe(201);
});

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

function submit(user: TestUser, threadId: string, body: Record<string, unknown>) {
  return send(server, `/api/threads/${threadId}/subagent-batches`, {
    headers: { authorization: `Bearer ${user.token}` },
    json: { submission_key: `schema-work-${++seq}`, ...body },
    timeoutMs: 60_000,
  });
}

async function batchCount(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
  return row!.n;
}

const message = (body: string) => (JSON.parse(body) as { error: { message: string } }).error.message;

/** The security review's 1.8 KB schema: d0 a pattern, each dN ten $refs to dN-1, `a` a $ref to d7 (10^7 evaluations). */
function fanOutSchema(): Record<string, unknown> {
  const $defs: Record<string, unknown> = { d0: { type: "string", pattern: "^(?:a|b)*$" } };
  for (let n = 1; n <= 7; n++) $defs[`d${n}`] = { allOf: Array.from({ length: 10 }, () => ({ $ref: `#/$defs/d${n - 1}` })) };
  return { type: "object", $defs, properties: { a: { $ref: "#/$defs/d7" } }, required: ["a"] };
}

const FAN_OUT_REFUSAL = `output_schema: one value can be checked against more than ${SCHEMA_MAX_EVALUATIONS} subschemas ($ref / allOf / anyOf / oneOf fan-out multiplies through references); at most ${SCHEMA_MAX_EVALUATIONS}`;

describe("a schema whose fan-out multiplies through references", () => {
  it("is refused at submission, 400 naming output_schema, within 2 s, writing nothing", async () => {
    const schema = fanOutSchema();
    expect(JSON.stringify(schema).length).toBeLessThan(1_900);
    const before = await batchCount();
    const started = performance.now();
    const res = await submit(alice, aliceThread, { items: [`[[json:{"a":"${"a".repeat(400)}"}]]`], output_schema: schema });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(res.status, res.body).toBe(400);
    expect(message(res.body)).toBe(FAN_OUT_REFUSAL);
    expect(await batchCount()).toBe(before);
  });

  it("a reference cycle that never moves to a child value is refused too; a recursive tree schema is not", async () => {
    const loop = await submit(alice, aliceThread, { items: ["x"], output_schema: { type: "object", allOf: [{ $ref: "#" }] } });
    expect(loop.status).toBe(400);
    expect(message(loop.body)).toBe("output_schema: a reference cycle returns to the same value without end (it never moves to a property or an item)");
    const tree = {
      $defs: { node: { type: "object", properties: { name: { type: "string" }, children: { type: "array", items: { $ref: "#/$defs/node" } } } } },
      $ref: "#/$defs/node",
    };
    const ok = await submit(alice, aliceThread, { items: ['[[json:{"name":"a","children":[{"name":"b","children":[]}]}]]'], output_schema: tree });
    expect(ok.status, ok.body).toBe(201);
  });

  it("as a /v1 response_format, the line is refused naming it and response_format", async () => {
    const client = new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: alice.token, maxRetries: 0 });
    const before = await batchCount();
    const format = { type: "json_schema", json_schema: { name: "fan", schema: fanOutSchema() } };
    const file = await client.files.create({
      file: await toFile(Buffer.from(jsonl([chatLine("ok", "x"), chatLine("fan", "x", { response_format: format })])), "fan.jsonl"),
      purpose: "batch",
    });
    const started = performance.now();
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(batch.status).toBe("failed");
    const param = "body.response_format.json_schema.schema";
    expect(batch.errors?.data?.map((e) => [e.line, e.code, e.param])).toEqual([[2, "invalid_body", param]]);
    expect(batch.errors?.data?.[0]?.message).toBe(`Line 2: ${FAN_OUT_REFUSAL.replace("output_schema", param)}`);
    expect(await batchCount()).toBe(before);
  });
});

describe("a schema within every budget that is slow on a long answer", () => {
  // 1,849 RE2 instructions (under the 5,000 of one pattern) that RE2 matches slowly on a/b text
  // (1.5 to 15 s on 99,000 characters, idle to loaded), evaluated forty times on one value (81
  // of the 1,000 evaluations allowed): a minute or more on the long answer, a millisecond on a
  // short one. The sibling item answers `b` only.
  const SLOW = ["a", "b"].flatMap((x) => ["a", "b"].map((y) => `(?:[ab]*${x}[ab]{19}${y}){20}c`)).join("|");
  const schema = {
    type: "object",
    $defs: { slow: { type: "string", pattern: SLOW } },
    properties: { a: { allOf: Array.from({ length: 40 }, () => ({ $ref: "#/$defs/slow" })) }, b: { type: "string" } },
  };
  // Random a/b (a fixed seed) and a final c.
  const letters: string[] = [];
  for (let i = 0, x = 7; i < 99_000; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    letters.push(x & 1024 ? "a" : "b");
  }
  const long = `${letters.join("")}c`;

  interface ItemRow {
    item_key: string;
    status: string;
    error: string | null;
    started_at: string | null;
    finished_at: string | null;
    output: unknown;
  }

  async function settledItems(user: TestUser, threadId: string, batchId: string, timeoutMs: number): Promise<ItemRow[]> {
    const path = `/api/threads/${threadId}/subagent-batches/${batchId}`;
    const headers = { authorization: `Bearer ${user.token}` };
    await until(
      async () => JSON.parse((await send(server, path, { headers })).body) as { status: string },
      (b) => ["completed", "failed", "cancelled"].includes(b.status),
      timeoutMs,
    );
    return (JSON.parse((await send(server, `${path}/items`, { headers })).body) as { items: ItemRow[] }).items;
  }

  it("fails only that item with invalid_output at the time limit; its sibling and another user's batch finish; the worker keeps beating", async () => {
    await until(() => countLiveWorkers(tdb.db, 5), (n) => n > 0, 60_000);
    const res = await submit(alice, aliceThread, {
      items: [`[[json:${JSON.stringify({ a: long })}]]`, `[[json:${JSON.stringify({ b: "fine" })}]]`],
      output_schema: schema,
    });
    expect(res.status, res.body).toBe(201);
    const other = await submit(bob, bobThread, { items: ["[[sleep:300]] one", "[[sleep:300]] two"] });
    expect(other.status, other.body).toBe(201);

    let beats = 0;
    let silent = 0;
    const watching = { on: true };
    const watch = (async () => {
      while (watching.on) {
        if ((await countLiveWorkers(tdb.db, 5)) > 0) beats++;
        else silent++;
        await new Promise((r) => setTimeout(r, 500));
      }
    })();
    const [slowItem, shortItem] = await settledItems(alice, aliceThread, (JSON.parse(res.body) as { id: string }).id, 120_000);
    const bobItems = await settledItems(bob, bobThread, (JSON.parse(other.body) as { id: string }).id, 30_000);
    watching.on = false;
    await watch;

    expect(slowItem).toMatchObject({ status: "failed", error: `invalid_output: output_schema validation took longer than ${VALIDATION_RETRY_LIMIT_MS / 1000} s` });
    const held = Date.parse(slowItem!.finished_at!) - Date.parse(slowItem!.started_at!);
    // The time limit and the longer one of its one retry (CPU time, at most WALL_FACTOR times
    // that of wall time where the machine is loaded), the model call of a 99,000-character answer
    // and settling; unbounded, the check alone takes a minute or more.
    expect(held).toBeLessThan((MATCH_TIME_LIMIT_MS + VALIDATION_RETRY_LIMIT_MS) * WALL_FACTOR + 13_000);
    expect(shortItem, shortItem!.error ?? "").toMatchObject({ status: "succeeded", output: { b: "fine" } });
    expect(bobItems.map((i) => i.status)).toEqual(["succeeded", "succeeded"]);
    expect(silent).toBe(0);
    expect(beats).toBeGreaterThan(0);
  }, 180_000);
});

describe("a /v1 batch file's schemas together", () => {
  it(`more than ${FILE_MAX_SCHEMAS} distinct schemas: refused naming the first line over the budget, quickly; shared schemas pass`, async () => {
    const client = new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: alice.token, maxRetries: 0 });
    const before = await batchCount();
    const format = (i: number) => ({
      type: "json_schema",
      json_schema: { name: "s", schema: { type: "object", properties: { code: { type: "string", pattern: `^C${i}-[a-z]{3}$` } } } },
    });
    // Line 1 and 2 share a schema; lines 2..101 bring the 100 distinct ones; line 102 one more.
    const lines = [chatLine("r0", "x", { response_format: format(0) })];
    for (let i = 0; i <= FILE_MAX_SCHEMAS; i++) lines.push(chatLine(`r${i + 1}`, "x", { response_format: format(i) }));
    const file = await client.files.create({ file: await toFile(Buffer.from(jsonl(lines)), "many.jsonl"), purpose: "batch" });
    const started = performance.now();
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(batch.status).toBe("failed");
    const param = "body.response_format.json_schema.schema";
    expect(batch.errors?.data?.map((e) => [e.line, e.code, e.param])).toEqual([[FILE_MAX_SCHEMAS + 2, "invalid_body", param]]);
    expect(batch.errors?.data?.[0]?.message).toBe(
      `Line ${FILE_MAX_SCHEMAS + 2}: ${param}: the file's distinct response_format schemas are over its budget: at most ${FILE_MAX_SCHEMAS} distinct schemas; use fewer distinct schemas in one batch file`,
    );
    expect(await batchCount()).toBe(before);

    // The same file without its last line is within the budget and is created.
    const fits = await client.files.create({ file: await toFile(Buffer.from(jsonl(lines.slice(0, -1))), "fits.jsonl"), purpose: "batch" });
    const created = await client.batches.create({ input_file_id: fits.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(created.status).not.toBe("failed");
    expect(created.request_counts?.total).toBe(FILE_MAX_SCHEMAS + 1);
  });
});

describe("compiled patterns, together", () => {
  it("stay within the cache's size however many distinct patterns grow their match caches", () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const letters: string[] = [];
    for (let i = 0, x = 7; i < 100_000; i++) {
      x = (x * 1103515245 + 12345) & 0x7fffffff;
      letters.push(x & 1024 ? "a" : "b");
    }
    const text = `${letters.join("")}c`;
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    let largest = 0;
    // Each grows RE2's lazy DFA to about 2 MB on this text: 40 of them, 80 MB if all were kept.
    for (let i = 0; i < 40; i++) {
      expect(testPattern(`[ab]*a[ab]{14}(?:c|x${i})`, "", text)).toBe(true);
      largest = Math.max(largest, patternCacheStats().bytes);
    }
    gc();
    const grown = process.memoryUsage().heapUsed - heapBefore;
    const { patterns, bytes } = patternCacheStats();
    expect(largest).toBeLessThanOrEqual(PATTERN_CACHE_BYTES);
    expect(bytes).toBeGreaterThan(PATTERN_CACHE_BYTES / 2); // the estimate sees the match caches
    expect(patterns).toBeLessThan(40);
    expect(grown).toBeLessThan(PATTERN_CACHE_BYTES + 16 * 1024 * 1024);
    // An evicted pattern is compiled again when it is needed.
    expect(testPattern("[ab]*a[ab]{14}(?:c|x0)", "", text)).toBe(true);
  }, 60_000);
});
