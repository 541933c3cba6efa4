import fc from "fast-check";
import { RE2JS } from "re2js";
import { describe, expect, it } from "vitest";
import {
  checkPatternProblem,
  newPatternBudget,
  PATTERN_MAX_PROGRAM,
  PATTERNS_MAX_PROGRAM,
  patternBudgetProblem,
  patternProgramBound,
} from "@/lib/check-pattern";

/**
 * The pattern budget (lib/check-pattern.ts) measured on a pattern's syntax: it must never let
 * through a pattern whose compiled program is larger than the walk said (that compile is the
 * cost the budget exists to avoid), and it must read RE2 syntax as RE2 does.
 */

const compiled = (pattern: string): number | null => {
  try {
    return RE2JS.compile(pattern).re2Input.prog.numInst();
  } catch {
    return null;
  }
};

const leaf = fc.constantFrom("a", "b", "ab", ".", "\\d", "[a-c]", "[[:alpha:]]", "\\Qa(", "(?P<n>a)", "()", "|", "[^)|]", "[]a]", "\\Qx)|\\E", "^", "$", "\\b", "\\pL", "\\x{41}", "{", "}", "a{x}", "\\{");
const regex = fc.letrec<{ re: string }>((tie) => ({
  re: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leaf,
    fc.array(tie("re"), { minLength: 2, maxLength: 3 }).map((xs) => xs.join("")),
    fc.array(tie("re"), { minLength: 2, maxLength: 3 }).map((xs) => `(?:${xs.join("|")})`),
    tie("re").map((x) => `(${x})`),
    tie("re").map((x) => `(?i:${x})`),
    tie("re").map((x) => `(?i)${x}`),
    fc
      .tuple(tie("re"), fc.constantFrom("*", "+", "?", "*?", "+?", "??"))
      .map(([x, q]) => `(?:${x})${q}`),
    fc
      .tuple(tie("re"), fc.nat(6), fc.option(fc.nat(6)), fc.boolean())
      .map(([x, n, m, open]) => `(?:${x}){${n}${open ? "," : m === null ? "" : `,${n + m}`}}`),
  ),
}));

describe("the pattern budget", () => {
  it("bounds the compiled program from above for any pattern RE2 compiles", () => {
    fc.assert(
      fc.property(regex.re, (pattern) => {
        const actual = compiled(pattern);
        if (actual === null) return;
        expect(patternProgramBound(pattern), pattern).toBeGreaterThanOrEqual(actual);
      }),
      { numRuns: 2_000 },
    );
  });

  it("refuses counted repetition above 100 wherever it is, and programs over the budget, without compiling", () => {
    expect(patternBudgetProblem("a{100}")).toBeNull();
    expect(patternBudgetProblem("a{101}")).toBe("counted repetition {101} is above the limit of 100");
    expect(patternBudgetProblem("(?:x|(?:y){0,1000})")).toBe("counted repetition {0,1000} is above the limit of 100");
    expect(patternBudgetProblem("a{5,}")).toBeNull();
    expect(patternBudgetProblem("a{500,}")).toBe("counted repetition {500,} is above the limit of 100");
    // Not repetitions: RE2 reads these braces as literals.
    for (const p of ["a{", "a{x}", "a{,5000}", "\\{5000}", "[{5000}]", "\\Q{5000}\\E"]) expect(patternBudgetProblem(p), p).toBeNull();
    // Nested counts multiply: 100 × 100 copies of a class.
    expect(patternBudgetProblem("(?:(?:[a-z]){100}){100}")).toMatch(/^expands to more than 5000 program instructions/);
    // A long alternation is as large as its text.
    const words = Array.from({ length: 2_000 }, (_, i) => `w${i}`).join("|");
    expect(patternBudgetProblem(words)).toMatch(/^expands to more than 5000/);
    // Deeply nested groups are refused before anything recurses far.
    expect(patternBudgetProblem(`${"(".repeat(5_000)}a${")".repeat(5_000)}`)).toBe("nests groups more than 200 deep");
  });

  it("the issue's pattern: refused in well under a second, where compiling it took seconds", () => {
    const words = Array.from({ length: 245 }, (_, i) => `${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}q`);
    const started = performance.now();
    for (let i = 0; i < 16; i++) expect(checkPatternProblem(`(?:${words.join("|")}){1000}`)).toMatch(/^counted repetition \{1000\}/);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it("names RE2 syntax it does not compile, and counts a submission's patterns together", () => {
    expect(checkPatternProblem("(a)\\1")).toMatch(/^does not compile \(RE2 syntax\): /);
    expect(checkPatternProblem("(?<=a)b")).toMatch(/^does not compile \(RE2 syntax\): /);
    const budget = newPatternBudget();
    // 245 three-letter words repeated 4 times: 3,918 instructions each, so the sixth passes 20,000.
    const words = Array.from({ length: 245 }, (_, i) => `${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}q`);
    const big = `(?:${words.join("|")}){4}`;
    expect(compiled(big)).toBe(3_918);
    expect(patternProgramBound(big)).toBeLessThanOrEqual(PATTERN_MAX_PROGRAM);
    const problems = Array.from({ length: 8 }, () => checkPatternProblem(big, "", budget));
    expect(problems.slice(0, 5)).toEqual([null, null, null, null, null]);
    expect(problems[5]).toBe(
      `with the patterns before it, expands to more than ${PATTERNS_MAX_PROGRAM} program instructions (the limit for one submission's patterns together)`,
    );
  });
});
