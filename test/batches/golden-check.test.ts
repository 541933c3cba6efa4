import { describe, expect, it } from "vitest";
import { runGolden } from "@/server/batches/checks";

/** The golden set's check on one answer: the equals check's rules, field by field for a typed answer. */

const golden = { name: "golden", type: "golden" } as const;

describe("runGolden", () => {
  it("passes a typed answer holding every field of expected, whatever else it holds", () => {
    expect(runGolden(golden, { text: "", output: { label: "yes", note: "x" }, expected: { label: "yes" } })).toEqual({ name: "golden", passed: true });
    expect(runGolden(golden, { text: "", output: { tags: ["b", "a"], n: { x: 1, y: 2 } }, expected: { n: { y: 2, x: 1 }, tags: ["b", "a"] } })).toEqual({
      name: "golden",
      passed: true,
    });
  });

  it("fails a typed answer missing a field or with another value there, naming the field as a JSON Pointer", () => {
    expect(runGolden(golden, { text: "", output: { note: "x" }, expected: { label: "yes" } })).toEqual({
      name: "golden",
      passed: false,
      reason: 'the answer has no value at /label, expected "yes"',
    });
    expect(runGolden(golden, { text: "", output: { "a/b": 2 }, expected: { "a/b": 1 } })).toEqual({ name: "golden", passed: false, reason: "/a~1b is 2, expected 1" });
    expect(runGolden(golden, { text: "", output: { tags: ["a", "b"] }, expected: { tags: ["b", "a"] } }).passed).toBe(false);
    expect(runGolden(golden, { text: "", output: ["yes"], expected: { label: "yes" } })).toEqual({
      name: "golden",
      passed: false,
      reason: 'the answer is ["yes"], expected an object with {"label":"yes"}',
    });
  });

  it("compares a typed answer whole when expected is not an object, and an untyped answer's text with expected", () => {
    expect(runGolden(golden, { text: "", output: ["a", "b"], expected: ["a", "b"] }).passed).toBe(true);
    expect(runGolden(golden, { text: "", output: 3, expected: 3 }).passed).toBe(true);
    expect(runGolden(golden, { text: "1", expected: "1" })).toEqual({ name: "golden", passed: true });
    // The text "1" is not the number 1: a string answer stays a string.
    expect(runGolden(golden, { text: "1", expected: 1 })).toEqual({ name: "golden", passed: false, reason: 'the answer is "1", expected 1' });
  });

  it("fails an item without an expected value", () => {
    expect(runGolden(golden, { text: "x", expected: null })).toEqual({ name: "golden", passed: false, reason: "the item has no expected value" });
    expect(runGolden(golden, { text: "x" })).toEqual({ name: "golden", passed: false, reason: "the item has no expected value" });
  });
});
