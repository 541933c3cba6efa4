import { describe, expect, it } from "vitest";
import type { Check } from "@/lib/api/batch-data";
import { jsonEqual, resolvePointer, runChecks } from "@/server/batches/checks";
import type { ResolvedModel } from "@/server/models/types";

/** The rules of regex and equals checks on one answer (no model, no database). */

const noJudge = {
  model: {} as ResolvedModel,
  resolve: () => {
    throw new Error("no judge here");
  },
  signal: new AbortController().signal,
  timeoutMs: 1_000,
  admit: async () => () => {},
};
const run = (checks: Check[], answer: { text?: string; output?: unknown; expected?: unknown }) =>
  runChecks({ checks, prompt: "p", text: answer.text ?? JSON.stringify(answer.output), output: answer.output, expected: answer.expected, judge: noJudge });

describe("checks rules", () => {
  it("JSON Pointers: escapes, array indexes, own properties only", () => {
    const doc = { "a/b": { "m~n": [10, 20] }, list: [{ x: 1 }], "": 5 };
    expect(resolvePointer(doc, "")).toBe(doc);
    expect(resolvePointer(doc, "/a~1b/m~0n/1")).toBe(20);
    expect(resolvePointer(doc, "/list/0/x")).toBe(1);
    expect(resolvePointer(doc, "/")).toBe(5);
    for (const missing of ["/list/01", "/list/-", "/list/1", "/nope", "/list/0/x/y", "/__proto__", "/constructor", "/list/length"])
      expect(resolvePointer(doc, missing)).toBeTypeOf("symbol");
  });

  it("deep equality of JSON values ignores key order, not types", () => {
    expect(jsonEqual({ a: [1, { b: null }], c: "x" }, { c: "x", a: [1, { b: null }] })).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 1, b: undefined })).toBe(false);
    expect(jsonEqual([1, 2], { 0: 1, 1: 2 })).toBe(false);
    expect(jsonEqual(1, "1")).toBe(false);
    expect(jsonEqual(null, {})).toBe(false);
  });

  it("regex: the whole text, or the value at a path (strings as is, other values as compact JSON); flags i, m, s", async () => {
    const output = { label: "Fruit", tags: ["a", "b"], n: 3 };
    const r = await run(
      [
        { name: "text", type: "regex", pattern: '"label":"Fruit"' },
        { name: "string", type: "regex", pattern: "^fruit$", flags: "i", path: "/label" },
        { name: "array", type: "regex", pattern: '^\\["a","b"\\]$', path: "/tags" },
        { name: "number", type: "regex", pattern: "^3$", path: "/n" },
        { name: "missing", type: "regex", pattern: ".", path: "/gone" },
        { name: "multiline", type: "regex", pattern: "^b$", flags: "m" },
        { name: "dotall", type: "regex", pattern: "a.b", flags: "s" },
      ],
      { output, text: JSON.stringify(output) },
    );
    expect(r.checks.map((c) => [c.name, c.passed])).toEqual([
      ["text", true],
      ["string", true],
      ["array", true],
      ["number", true],
      ["missing", false],
      ["multiline", false],
      ["dotall", false],
    ]);
    expect(r.checks[4]!.reason).toBe("the answer has no value at /gone");
    const lines = await run(
      [
        { name: "multiline", type: "regex", pattern: "^b$", flags: "m" },
        { name: "dotall", type: "regex", pattern: "a.b", flags: "s" },
        { name: "no_dotall", type: "regex", pattern: "a.b" },
      ],
      { text: "a\nb" },
    );
    expect(lines.checks.map((c) => c.passed)).toEqual([true, true, false]);
    expect(lines.verdict).toBe("failed");
  });

  it("a pattern RE2 refuses fails its check with a reason; pathological patterns run in linear time", async () => {
    const bad = await run([{ name: "backref", type: "regex", pattern: "(a)\\1" }], { text: "aa" });
    expect(bad.checks[0]).toMatchObject({ passed: false, reason: expect.stringMatching(/^invalid pattern: /) });
    const text = `${"a".repeat(100_000)}b`;
    const t0 = performance.now();
    const r = await run(
      [
        { name: "nested", type: "regex", pattern: "(a+)+$" },
        { name: "alternation", type: "regex", pattern: "^(a|aa)*c" },
        { name: "classes", type: "regex", pattern: "(\\w*)*\\d" },
      ],
      { text },
    );
    expect(performance.now() - t0).toBeLessThan(2_000);
    expect(r.checks.map((c) => c.passed)).toEqual([false, false, false]);
    expect(r.checks[0]!.reason!.length).toBeLessThan(500);
  });

  it("equals: missing expected, missing paths and differing values each say so, bounded", async () => {
    const checks: Check[] = [{ name: "eq", type: "equals", path: "/label", expected_path: "/want" }];
    expect((await run(checks, { output: { label: "x" } })).checks[0]!.reason).toBe("the item has no expected value");
    expect((await run(checks, { output: { label: "x" }, expected: { other: 1 } })).checks[0]!.reason).toBe("expected has no value at /want");
    expect((await run(checks, { output: {}, expected: { want: "x" } })).checks[0]!.reason).toBe('the answer has no value at /label, expected "x"');
    const long = "z".repeat(10_000);
    const differ = (await run(checks, { output: { label: long }, expected: { want: { deep: [1, 2] } } })).checks[0]!;
    expect(differ.passed).toBe(false);
    expect(differ.reason).toMatch(/^\/label is "z+…, expected \{"deep":\[1,2\]\}$/);
    expect(differ.reason!.length).toBeLessThan(300);
    expect((await run(checks, { output: { label: { a: 1, b: [true] } }, expected: { want: { b: [true], a: 1 } } })).verdict).toBe("passed");
  });

  it("no checks: no verdict", async () => {
    expect(await run([], { text: "x" })).toEqual({ checks: [], verdict: null, usage: new Map() });
  });
});
