import { beforeAll, describe, expect, it } from "vitest";
import { batchProjectionSchema } from "@/lib/api/batches";
import { inputFields } from "@/lib/result-columns";
import { exportResultsStream } from "@/server/http/export";
import { exportArgs } from "../helpers/export";
import { call, makeThread, makeUser, setupApiDatabase, type TestUser } from "./helpers";

/**
 * PostgreSQL writes the export's JSON lines. Whatever it stores, each line must be byte for byte
 * what JSON.stringify writes for the same values read normally.
 */

const tdb = await setupApiDatabase();
let user: TestUser;
let thread: string;

beforeAll(async () => {
  user = await makeUser(tdb, "copy");
  thread = await makeThread(tdb, user);
});

const controls = Array.from({ length: 31 }, (_, i) => String.fromCharCode(i + 1)).join("");
const TRICKY: (string | null)[] = [
  "plain",
  "",
  null,
  controls,
  `every control: ${controls} end`,
  "vertical\u000btab and form\ffeed",
  'quotes " and "" and \\" mixed',
  "backslash \\ and \\\\ and \\v and \\n and \\N literally",
  "\\N",
  "\\",
  '"',
  "tab\there\r\nnewline",
  "unicode é ✓ 中文 😀 \u2028 \u2029 \u007f",
  `${"long ".repeat(30_000)}"quoted"\n${"ü".repeat(10_000)}`,
  // Long (the web process escapes every result from its raw bytes): every escape class,
  // 2-, 3- and 4-byte UTF-8, and U+2028 / U+2029, which JSON.stringify leaves unescaped.
  randomText(4242, 40_000),
  `${controls}"\\\u2028\u2029😀é中\u007f`.repeat(1_000),
];

interface Expected {
  item_key: string;
  input: unknown;
  position: number;
  status: string;
  attempts: number;
  result: unknown;
  error: string | null;
  expected: unknown;
  output: unknown;
  checks: unknown[];
  verdict: string | null;
  review_state: string | null;
  review_note: string | null;
  reviewed_output: unknown;
  usage: { input_tokens: number; output_tokens: number; cached_input_tokens: number; cache_write_tokens: number };
}

/** Deterministic pseudo-random text drawn from every class JSON escaping distinguishes (PostgreSQL text holds no NUL). */
function randomText(seed: number, length: number): string {
  const pool = [..."abcXYZ019 /'`<>&{}[]", '"', "\\", "\n", "\r", "\t", "\b", "\f", "\u0001", "\u001f", "\u007f", "é", "✓", "\u2028", "\u2029", "😀", "中文"];
  let x = seed;
  let out = "";
  while (out.length < length) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    out += pool[x % pool.length];
  }
  return out;
}

async function exportText(batchId: string, options: { fetchRows?: number; fetchBytes?: number } = {}): Promise<{ text: string; chunks: string[] }> {
  const decoder = new TextDecoder();
  const chunks: string[] = [];
  for await (const chunk of (await exportResultsStream(tdb.sql, exportArgs(batchId, options))) as unknown as AsyncIterable<Uint8Array>)
    chunks.push(decoder.decode(chunk, { stream: true }));
  return { text: chunks.join(""), chunks };
}

async function expectedLines(batchId: string): Promise<string> {
  const rows = await tdb.sql<{ item_key: string; position: number; status: string; attempts: number; result: string | null; error: string | null; input_tokens: string; output_tokens: string; cached_input_tokens: string; cache_write_tokens: string; input: string; expected: unknown; output: unknown; checks: unknown[] | null; verdict: string | null; review_state: string | null; review_note: string | null; reviewed_output: unknown; typed: boolean; filled: boolean; object_items: boolean }[]>`
    select output is not null as typed, prompt <> input as filled,
           coalesce((select execution_spec -> 'input_fields' from subagent_batches where id = ${batchId}), '[]') <> '[]'::jsonb as object_items,
           item_key, position, status, attempts, result, error, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, input, expected, output, checks, verdict,
           review_state, review_note, reviewed_output
      from subagent_batch_items where batch_id = ${batchId} order by position`;
  return rows
    .map((r) => {
      const line: Expected = {
        item_key: r.item_key,
        // Values, not JSON in strings: an object item's fields, a typed answer's value (the output's).
        input: r.object_items && r.filled ? (inputFields(r.input) ?? r.input) : r.input,
        position: r.position,
        status: r.status,
        attempts: r.attempts,
        result: r.typed ? r.output : r.result,
        error: r.error,
        expected: r.expected,
        output: r.output,
        checks: r.checks ?? [],
        verdict: r.verdict,
        review_state: r.review_state,
        review_note: r.review_note,
        reviewed_output: r.reviewed_output,
        usage: {
          input_tokens: Number(r.input_tokens),
          output_tokens: Number(r.output_tokens),
          cached_input_tokens: Number(r.cached_input_tokens),
          cache_write_tokens: Number(r.cache_write_tokens),
        },
      };
      return `${JSON.stringify(line)}\n`;
    })
    .join("");
}

async function submit(key: string, items: { item_key: string; prompt: string }[]): Promise<string> {
  const res = await call("POST", `/api/threads/${thread}/subagent-batches`, { token: user.token, json: { submission_key: key, items } });
  expect(res.status).toBe(201);
  return batchProjectionSchema.parse(await res.json()).id;
}

describe("results.jsonl bytes", () => {
  it("matches JSON.stringify for pseudo-random text of every escape class", async () => {
    const items = Array.from({ length: 120 }, (_, i) => ({ item_key: `r${i} ${randomText(i + 500, 30)}`, prompt: randomText(i + 900, 200) }));
    const batchId = await submit("random", items);
    for (let seed = 1; seed <= 120; seed++)
      await tdb.sql`
        update subagent_batch_items set status = 'succeeded', result = ${randomText(seed, seed * 37)},
               error = ${seed % 3 ? null : randomText(seed + 7, 50)}
         where batch_id = ${batchId} and position = ${seed}`;
    expect((await exportText(batchId)).text).toBe(await expectedLines(batchId));
  });

  it("writes output, checks and a reviewed output as compact JSON, as JSON.stringify writes the stored value", async () => {
    const outputs: unknown[] = [
      { label: "positive", score: 0.75, tags: ["a", "b, c"], nested: { deep: [1, [2, {}], { "k: v": "x\"y" }] } },
      "plain string",
      'quotes " \\ and \n newline and \u0001 control',
      42,
      -1.5,
      true,
      null,
      [],
      {},
      [{ "": "" }, [], [[]]],
      { "unicode é ✓ 中文 😀 \u2028": "\u2029 ü" },
      // Numbers as jsonb writes them: the same as JSON.stringify except in exponent form (1e-7, 1e21).
      { a: null, b: false, c: 0.001, d: 123456789012 },
    ];
    const batchId = await submit("outputs", outputs.map((_, i) => ({ item_key: `o${i}`, prompt: "x" })));
    for (const [i, output] of outputs.entries()) {
      const checks = i % 2 ? [{ name: "label", passed: false, reason: 'said "no", twice' }, { name: "score", passed: true, score: 0.5 }] : null;
      // Every third item unreviewed, then accepted with the answer as a correction, then rejected with a note.
      const review = ([null, "accepted", "rejected"] as const)[i % 3]!;
      await tdb.sql`
        update subagent_batch_items set status = 'succeeded', output = ${output === null ? null : JSON.stringify(output)}::jsonb,
               checks = ${checks ? JSON.stringify(checks) : null}::jsonb, verdict = ${checks ? "failed" : null},
               review_state = ${review}, review_note = ${review === "rejected" ? `no: "${i}"\n\u2028` : null},
               reviewed_output = ${review === "accepted" && output !== null ? JSON.stringify(output) : null}::jsonb
         where batch_id = ${batchId} and position = ${i + 1}`;
    }
    expect((await exportText(batchId)).text).toBe(await expectedLines(batchId));
  });

  it("writes expected as compact JSON; a large result is spliced in its own place even when expected or output holds ',\"result\":'", async () => {
    const expecteds: unknown[] = [{ label: "spam", n: [1, { "k: v": 'x"y' }] }, "ham", 7, null, { a: 1, result: "decoy" }, [",\"result\":"]];
    const batchId = await submit("expected", expecteds.map((_, i) => ({ item_key: `e${i}`, prompt: "x" })));
    for (const [i, expected] of expecteds.entries())
      await tdb.sql`
        update subagent_batch_items set status = 'succeeded', expected = ${expected === null ? null : JSON.stringify(expected)}::jsonb,
               -- A typed answer's result is its output; the others are text.
               output = ${i % 3 === 0 ? JSON.stringify({ b: 2, result: "decoy" }) : null}::jsonb,
               -- Long every other row (once spliced into a line PostgreSQL wrote, now as every result).
               result = ${i % 2 ? `big ${"\"\n✓".repeat(10_000)}` : "small"}
         where batch_id = ${batchId} and position = ${i + 1}`;
    const { text } = await exportText(batchId);
    expect(text).toBe(await expectedLines(batchId));
    expect(JSON.parse(text.split("\n")[4]!).expected).toEqual({ a: 1, result: "decoy" });
  });

  it("writes an object item's input as its fields and a typed answer's result as its value, text stays text", async () => {
    const items = [
      { item_key: "f0", text: "plain", result: ',"result":', n: 1e21 },
      { item_key: "f1", text: 'quote " and \u2028', result: '{"nested":[1,"two"]}', n: -0.5 },
      // An explicit prompt among object items is text, even when it reads as a JSON object.
      { item_key: "f2", prompt: '{"looks":"like an object"}' },
      { item_key: "f3", text: "\u0001 control", result: "r", n: 0 },
    ];
    const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
      token: user.token,
      json: { submission_key: "fields", items, prompt_template: "Say {{text}} {{result}} {{n}}" },
    });
    expect(res.status, await res.clone().text()).toBe(201);
    const batchId = batchProjectionSchema.parse(await res.json()).id;
    const outputs = [{ label: "a", "k: v": 'x"y' }, null, null, [1, { b: null }]];
    for (const [i, output] of outputs.entries())
      await tdb.sql`
        update subagent_batch_items set status = 'succeeded', output = ${output === null ? null : JSON.stringify(output)}::jsonb,
               -- Untyped and long, after an input whose fields hold ',"result":'.
               result = ${output === null ? `big ${'","result":'.repeat(5_000)}` : JSON.stringify(output)}
         where batch_id = ${batchId} and position = ${i + 1}`;
    const { text } = await exportText(batchId);
    expect(text).toBe(await expectedLines(batchId));
    const lines = text.trimEnd().split("\n").map((l) => JSON.parse(l));
    expect(lines[0].input).toEqual({ text: "plain", result: ',"result":', n: 1e21 });
    expect(lines[0].result).toEqual({ label: "a", "k: v": 'x"y' });
    expect(lines[1].input).toEqual({ text: 'quote " and \u2028', result: '{"nested":[1,"two"]}', n: -0.5 });
    expect(lines[1].result).toBe(`big ${'","result":'.repeat(5_000)}`);
    expect(lines[2].input).toBe('{"looks":"like an object"}');
    expect(lines[3].result).toEqual([1, { b: null }]);
  });

  it("cuts each page at fetchBytes of stored text (always at least one row)", async () => {
    const batchId = await submit("pages", Array.from({ length: 12 }, (_, i) => ({ item_key: `p${i}`, prompt: "x" })));
    await tdb.sql`update subagent_batch_items set status = 'succeeded', result = repeat('r', 20000) where batch_id = ${batchId}`;
    // Rows start a page's 1st, 2nd and 3rd 20 kB under 50 kB; the 4th would start at 60 kB.
    const small = await exportText(batchId, { fetchBytes: 50_000 });
    expect(small.text).toBe(await expectedLines(batchId));
    expect(small.chunks.map((c) => c.split("\n").length - 1)).toEqual([3, 3, 3, 3]);
    // A row larger than the budget still goes, alone.
    const tiny = await exportText(batchId, { fetchBytes: 1_000 });
    expect(tiny.chunks.map((c) => c.split("\n").length - 1)).toEqual(Array(12).fill(1));
  });


  it("matches JSON.stringify for every kind of stored text, in result, error, item_key and input", async () => {
    const items = TRICKY.map((_, i) => ({ item_key: `k${i} "${TRICKY[i] === null ? "" : (TRICKY[i] as string).slice(0, 40)}`, prompt: `p ${(TRICKY[i] ?? "").slice(0, 5_000)}` }));
    const res = await call("POST", `/api/threads/${thread}/subagent-batches`, {
      token: user.token,
      json: { submission_key: "tricky", items },
    });
    expect(res.status).toBe(201);
    const batchId = batchProjectionSchema.parse(await res.json()).id;
    for (const [i, value] of TRICKY.entries()) {
      const error = value === null ? null : `err:${value}`;
      await tdb.sql`
        update subagent_batch_items
           set status = ${value === null ? "failed" : "succeeded"}, result = ${value}, error = ${error},
               attempts = ${i}, input_tokens = ${i * 1_000_003}, output_tokens = ${2 ** 40 + i},
               cached_input_tokens = ${i * 1_000_001}, cache_write_tokens = ${i}
         where batch_id = ${batchId} and position = ${i + 1}`;
    }
    const expected = await expectedLines(batchId);

    for (const fetchRows of [1, 5, 100]) {
      let text = "";
      const decoder = new TextDecoder();
      for await (const chunk of (await exportResultsStream(tdb.sql, exportArgs(batchId, { fetchRows }))) as unknown as AsyncIterable<Uint8Array>)
        text += decoder.decode(chunk, { stream: true });
      expect(text).toBe(expected);
    }
  });
});
