import type { ChildProcess } from "node:child_process";
import { monitorEventLoopDelay } from "node:perf_hooks";
import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Check } from "@/lib/api/batch-data";
import { CHECK_READ_MAX_CHARS, runChecks } from "@/server/batches/checks";
import { MATCH_TIME_LIMIT_MS } from "@/server/runtime/pattern-thread";
import { resolveModel } from "@/server/models/index";
import { configSchema } from "@/lib/config";
import { makeThread, makeUser, setupApiDatabase, type TestUser } from "../api/helpers";
import { chatLine, jsonl, spawnWorker, stopWorker, until } from "../compat/support";
import type { TestDatabase } from "../helpers/db";
import { send, startWebServer, type WebServer } from "../helpers/web-server";

/**
 * User patterns under abuse (DESIGN.md "Holding under abuse (third round)", "Patterns are
 * bounded"), black-box over real sockets: the web process refuses a pattern over the program
 * budget naming its field, within 2 s, while /api/health keeps answering under 1 s; a valid
 * pattern still runs on a real worker process; a regex check reads the first 1 MiB of an answer
 * and never holds the event loop.
 */

let tdb: TestDatabase;
let server: WebServer;
let alice: TestUser;
let threadId: string;
let worker: ChildProcess | undefined;
let seq = 0;

beforeAll(async () => {
  tdb = await setupApiDatabase();
  server = await startWebServer({ preload: ["/api/threads/[threadId]/subagent-batches", "/api/health", "/v1/"] });
  alice = await makeUser(tdb, "patterns");
  threadId = await makeThread(tdb, alice);
  // A check reads 1 MiB of an answer; the stored result may be longer than the default 100,000.
  worker = spawnWorker(tdb, { FLOTILLA__SUBAGENT_BATCHES__MAX_RESULT_CHARS: "2000000" });
});

afterAll(async () => {
  await stopWorker(worker);
  await server?.close();
});

/** The pattern: 245 three-letter alternatives (990 characters) repeated `{count}`. */
function alternation(count: number, salt = ""): string {
  const words = Array.from({ length: 245 }, (_, i) => `${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}${salt || "q"}`);
  return `(?:${words.join("|")}){${count}}`;
}

const auth = () => ({ authorization: `Bearer ${alice.token}` });

function submit(body: Record<string, unknown>) {
  return send(server, `/api/threads/${threadId}/subagent-batches`, {
    headers: auth(),
    json: { submission_key: `patterns-${++seq}`, ...body },
    timeoutMs: 60_000,
  });
}

/** `work` while /api/health is asked again and again: its answer, its duration and the slowest health answer. */
async function underHealthProbe<T>(work: () => Promise<T>): Promise<{ result: T; ms: number; slowestHealthMs: number }> {
  let done = false;
  const healthMs: number[] = [];
  const probe = (async () => {
    while (!done) {
      const started = performance.now();
      const res = await send(server, "/api/health", { timeoutMs: 10_000 });
      healthMs.push(performance.now() - started);
      expect(res.status).toBe(200);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const started = performance.now();
  const result = await work();
  const ms = performance.now() - started;
  done = true;
  await probe;
  return { result, ms, slowestHealthMs: Math.max(...healthMs) };
}

async function batchCount(): Promise<number> {
  const [row] = await tdb.sql<{ n: number }[]>`select count(*)::int as n from subagent_batches`;
  return row!.n;
}

const message = (body: string) => (JSON.parse(body) as { error: { message: string } }).error.message;

describe("regex checks", () => {
  it("sixteen 990-character alternations repeated {1000}: 400 naming the field within 2 s, /api/health under 1 s meanwhile", async () => {
    const before = await batchCount();
    const checks = Array.from({ length: 16 }, (_, i) => ({ name: `c${i}`, type: "regex", pattern: alternation(1000, String.fromCharCode(107 + (i % 10))) }));
    expect(checks[0]!.pattern.length).toBeGreaterThanOrEqual(985);
    const { result, ms, slowestHealthMs } = await underHealthProbe(() => submit({ items: ["a"], checks }));
    expect(result.status).toBe(400);
    expect(message(result.body)).toBe("checks.0.pattern: counted repetition {1000} is above the limit of 100");
    expect(ms).toBeLessThan(2_000);
    expect(slowestHealthMs).toBeLessThan(1_000);
    expect(await batchCount()).toBe(before);
  });

  it("names the check that is over: a counted repetition above 100, nested repetitions that multiply past the program budget", async () => {
    const fine = { name: "fine", type: "regex", pattern: "^[A-Z]{2}\\d{3}$" };
    const at3 = async (pattern: string) => {
      const res = await submit({ items: ["a"], checks: [fine, fine, fine, { name: "bad", type: "regex", pattern }].map((c, i) => ({ ...c, name: `c${i}` })) });
      expect(res.status).toBe(400);
      return message(res.body);
    };
    expect(await at3("x{101}")).toBe("checks.3.pattern: counted repetition {101} is above the limit of 100");
    expect(await at3("a{1,1000}")).toBe("checks.3.pattern: counted repetition {1,1000} is above the limit of 100");
    // Each count is at most 100, but nested they copy the innermost 8,000 times.
    expect(await at3("(?:(?:(?:a|b){20}){20}){20}")).toMatch(/^checks\.3\.pattern: expands to more than 5000 program instructions/);
    // `{` that is not a repetition is a literal, as RE2 reads it.
    const literal = await submit({ items: ["a"], checks: [{ name: "brace", type: "regex", pattern: "a{x}|\\{1000\\}|[{1000}]" }] });
    expect(literal.status).toBe(201);
  });

  it("the checks' patterns together: many patterns each under the budget are refused past the submission's total, within 2 s", async () => {
    // Each 3,918 instructions (compiled for real): the sixth takes the total past 20,000.
    const checks = Array.from({ length: 16 }, (_, i) => ({ name: `big${i}`, type: "regex", pattern: alternation(4, String.fromCharCode(97 + i)) }));
    const { result, ms, slowestHealthMs } = await underHealthProbe(() => submit({ items: ["a"], checks }));
    expect(result.status).toBe(400);
    expect(message(result.body)).toMatch(/^checks\.5\.pattern: with the patterns before it, expands to more than 20000 program instructions/);
    expect(ms).toBeLessThan(2_000);
    expect(slowestHealthMs).toBeLessThan(1_000);
  });
});

describe("output_schema patterns", () => {
  const big = alternation(1000);

  it("a pattern with {1000} anywhere in the schema is refused naming its path, within 2 s, before Ajv compiles it", async () => {
    const cases: Array<[unknown, string]> = [
      [{ type: "string", pattern: big }, "output_schema.pattern"],
      [
        { type: "object", properties: { x: { type: "array", items: { anyOf: [{ type: "number" }, { type: "string", pattern: big }] } } } },
        "output_schema.properties.x.items.anyOf.1.pattern",
      ],
      [{ type: "object", patternProperties: { "^(?:ab){1000}$": { type: "string" } } }, 'output_schema.patternProperties["^(?:ab){1000}$"]'],
      [{ type: "object", $defs: { code: { type: "string", pattern: "^[a-z]{5000}$" } } }, "output_schema.$defs.code.pattern"],
    ];
    for (const [output_schema, field] of cases) {
      const { result, ms, slowestHealthMs } = await underHealthProbe(() => submit({ items: ["a"], output_schema }));
      expect(result.status, result.body).toBe(400);
      expect(message(result.body)).toMatch(new RegExp(`^${field.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: counted repetition \\{(1000|5000)\\} is above the limit of 100$`));
      expect(ms).toBeLessThan(2_000);
      expect(slowestHealthMs).toBeLessThan(1_000);
    }
  });

  it("a property named pattern and a `pattern` key inside const data are not patterns", async () => {
    const res = await submit({
      items: ["a"],
      output_schema: {
        type: "object",
        properties: { pattern: { type: "string" }, meta: { const: { pattern: "a{1000}" } } },
      },
    });
    expect(res.status, res.body).toBe(201);
  });
});

describe("compatible response_format schemas", () => {
  it("a batch line whose json_schema holds a {1000} pattern is refused naming the line and the field, and runs nothing", async () => {
    const client = new OpenAI({ baseURL: `${server.origin}/v1`, apiKey: alice.token, maxRetries: 0 });
    const before = await batchCount();
    const format = (pattern: string) => ({
      type: "json_schema",
      json_schema: { name: "code", schema: { type: "object", properties: { code: { type: "string", pattern } } } },
    });
    const file = await client.files.create({
      file: await toFile(Buffer.from(jsonl([chatLine("ok", "x", { response_format: format("^[A-Z]{2}$") }), chatLine("bad", "x", { response_format: format(alternation(1000)) })])), "in.jsonl"),
      purpose: "batch",
    });
    const started = performance.now();
    const batch = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(batch.status).toBe("failed");
    const param = "body.response_format.json_schema.schema.properties.code.pattern";
    expect(batch.errors?.data?.map((e) => [e.line, e.code, e.param])).toEqual([[2, "invalid_body", param]]);
    expect(batch.errors?.data?.[0]?.message).toBe(`Line 2: ${param}: counted repetition {1000} is above the limit of 100`);
    expect(await batchCount()).toBe(before);
  });
});

describe("valid patterns on a real worker", () => {
  interface ItemRow {
    item_key: string;
    status: string;
    output: unknown;
    checks: Array<{ name: string; passed: boolean; reason?: string }>;
    verdict: string | null;
  }

  async function finishedItems(batchId: string): Promise<ItemRow[]> {
    const path = `/api/threads/${threadId}/subagent-batches/${batchId}`;
    await until(
      async () => JSON.parse((await send(server, path, { headers: auth() })).body) as { status: string },
      (b) => ["completed", "failed", "cancelled"].includes(b.status),
      60_000,
    );
    return (JSON.parse((await send(server, `${path}/items`, { headers: auth() })).body) as { items: ItemRow[] }).items;
  }

  it("a schema pattern and regex checks run: typed output validated, checks pass and fail as they should", async () => {
    const res = await submit({
      items: ['[[json:{"code":"AB123"}]]', '[[json:{"code":"XY999"}]]', '[[json:{"code":"nope"}]]'],
      output_schema: { type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{2}\\d{3}$" } }, required: ["code"] },
      checks: [
        { name: "starts_ab", type: "regex", pattern: "^AB", path: "/code" },
        { name: "digits", type: "regex", pattern: "\\d{3}" },
      ],
    });
    expect(res.status, res.body).toBe(201);
    const { id } = JSON.parse(res.body) as { id: string };
    const [ab, xy, nope] = await finishedItems(id);
    expect(ab).toMatchObject({ status: "succeeded", output: { code: "AB123" }, verdict: "passed" });
    expect(xy).toMatchObject({ status: "succeeded", output: { code: "XY999" }, verdict: "failed" });
    expect(xy!.checks).toEqual([
      { name: "starts_ab", passed: false, reason: '/code "XY999" does not match /^AB/' },
      { name: "digits", passed: true },
    ]);
    // The schema's own pattern refused the third answer.
    expect(nope).toMatchObject({ status: "failed" });
  });

  it("a check reads the first 1 MiB of a longer answer", async () => {
    const res = await submit({
      items: ["[[chars:1500000]] long"],
      checks: [
        { name: "tail", type: "regex", pattern: "\\z-never-here" },
        { name: "head", type: "regex", pattern: "(?s)^.{100}" },
      ],
    });
    expect(res.status, res.body).toBe(201);
    const [item] = await finishedItems((JSON.parse(res.body) as { id: string }).id);
    expect(item).toMatchObject({ status: "succeeded", verdict: "failed" });
    expect(item!.checks[0]!.reason).toMatch(/^the answer \(its first 1048576 characters\) "/);
    expect(item!.checks[1]).toEqual({ name: "head", passed: true });
  });
});

describe("the checks runner", () => {
  const config = configSchema.parse({});
  // Regex checks only: the judge context is never used.
  const judge = {
    model: resolveModel(config, {}),
    resolve: () => resolveModel(config, {}),
    signal: new AbortController().signal,
    timeoutMs: 1_000,
    admit: async () => () => {},
  };

  function randomText(n: number, seed: number): string {
    const out = new Array<string>(n);
    let x = seed;
    for (let i = 0; i < n; i++) {
      x = (x * 1103515245 + 12345) & 0x7fffffff;
      out[i] = x & 1024 ? "a" : "b";
    }
    return out.join("");
  }

  it("reads at most the first 1 MiB of the answer and of a value at a path", async () => {
    const text = `${"a".repeat(CHECK_READ_MAX_CHARS)}TAIL`;
    const checks: Check[] = [
      { name: "tail", type: "regex", pattern: "TAIL" },
      { name: "all_a", type: "regex", pattern: "^a+$" },
      { name: "at_path", type: "regex", pattern: "TAIL", path: "/big" },
    ];
    const out = await runChecks({ checks, prompt: "p", text, output: { big: text }, judge });
    expect(out.checks[0]).toMatchObject({ passed: false, reason: expect.stringMatching(/^the answer \(its first 1048576 characters\) "a{10}/) });
    expect(out.checks[1]).toEqual({ name: "all_a", passed: true });
    expect(out.checks[2]).toMatchObject({ passed: false, reason: expect.stringMatching(/^\/big \(its first 1048576 characters\)/) });
  });

  it("a pass over many items with 1 MB answers never holds the event loop 100 ms; a pattern RE2 needs seconds for fails at the time limit", async () => {
    const texts = Array.from({ length: 6 }, (_, i) => `${randomText(CHECK_READ_MAX_CHARS - 1, i + 1)}c`);
    const ordinary: Check[] = ["^[ab]+c$", "(?i)A+B", "[ab]*a[ab]{20}$", "b{7}", "(a|b)*c", "\\bab", "aaaa|bbbb", "(?m)^a"].map((pattern, i) => ({
      name: `r${i}`,
      type: "regex",
      pattern,
    }));
    // 463 instructions: about 8 s on 1 MB on an idle core.
    const slow: Check = { name: "slow", type: "regex", pattern: "(?:[ab]*a[ab]{20}){20}c" };
    await runChecks({ checks: ordinary.slice(0, 1), prompt: "p", text: texts[1]!, judge }); // a large text: the thread starts
    // What the machine alone adds (a loaded 2-core box preempts even an idle loop): the same
    // measure over an idle second, so the bound is on what the checks themselves hold.
    const idle = monitorEventLoopDelay({ resolution: 10 });
    idle.enable();
    await new Promise((r) => setTimeout(r, 1_000));
    idle.disable();
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const started = performance.now();
    const outcomes = [];
    for (const [i, text] of texts.entries()) outcomes.push(await runChecks({ checks: i === 0 ? [...ordinary, slow] : ordinary, prompt: "p", text, judge }));
    const ms = performance.now() - started;
    delay.disable();
    expect((delay.max - idle.max) / 1e6, `max delay ${delay.max / 1e6} ms, idle ${idle.max / 1e6} ms`).toBeLessThan(100);
    expect(outcomes[0]!.checks.at(-1)).toEqual({
      name: "slow",
      passed: false,
      reason: `the pattern did not finish within ${MATCH_TIME_LIMIT_MS / 1000} s on the answer`,
    });
    for (const o of outcomes) expect(o.checks.slice(0, ordinary.length).map((c) => c.name)).toEqual(ordinary.map((c) => c.name));
    expect(outcomes.every((o) => o.checks[0]!.passed && o.checks[4]!.passed)).toBe(true);
    expect(ms).toBeLessThan(60_000);
  }, 120_000);
});
