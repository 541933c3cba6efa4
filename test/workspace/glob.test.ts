import picomatch from "picomatch/posix";
import { describe, expect, it } from "vitest";
import { fileGlobMatcher, globProblem } from "@/lib/api/files";
import { compileGlob } from "@/lib/glob";

/**
 * The files glob (lib/glob.ts, linear in the path) keeps the semantics batches over files had
 * with picomatch (POSIX, dotfiles matched): a table of the documented cases, and a property
 * check against picomatch itself over random globs and paths of the shapes users write.
 */

describe("glob semantics", () => {
  it.each([
    ["*.md", "a.md", true],
    ["*.md", ".hidden.md", true],
    ["*.md", "docs/a.md", false],
    ["*", "a/b", false],
    ["docs/**", "docs/c.md", true],
    ["docs/**", "docs/deep/d.md", true],
    ["docs/**", "docs", true],
    ["**/*.md", "a.md", true],
    ["**/*.md", "x/y/z.md", true],
    ["a/**/b", "a/b", true],
    ["a/**/b", "a/x/y/b", true],
    ["a/**/**/b", "a/b", true],
    ["**", "a/b/c", true],
    ["**.md", "x/y.md", true],
    ["a**b", "axyb", true],
    ["a**b", "ax/yb", false],
    ["?.md", "a.md", true],
    ["?.md", "/.md", false],
    ["[a-c].md", "b.md", true],
    // picomatch answers these two the wrong way round (its posix "[!" handling); POSIX says negation.
    ["[!a].md", "a.md", false, "picomatch differs"],
    ["[!a].md", "b.md", true, "picomatch differs"],
    ["[^a].md", "c.md", true],
    ["[[:digit:]].md", "7.md", true],
    ["{a,b}.md", "b.md", true],
    ["{a}.md", "{a}.md", true],
    ["{a,{b,c}}.md", "c.md", true],
    ["*.(md|txt)", "a.txt", true],
    ["*.@(md|txt)", "a.csv", false],
    ["+(a).md", "aaa.md", true],
    ["?(x)y", "y", true],
    ["a\\*b", "a*b", true],
    ["a\\*b", "axb", false],
    ["!*.md", "a.txt", true],
    ["!*.md", "a.md", false],
    ["./a.md", "a.md", true],
  ] as [string, string, boolean, string?][])("%s against %s → %s", (glob, path, expected, differs) => {
    expect(compileGlob(glob)(path)).toBe(expected);
    // The answer picomatch gave batches before, except where it contradicts POSIX.
    expect(picomatch(glob, { dot: true })(path)).toBe(differs ? !expected : expected);
  });

  it("refuses !(...) (not matchable in linear time) with a message; the dialog's matcher matches nothing", () => {
    expect(globProblem("!(a).md")).toContain("!(...)");
    expect(fileGlobMatcher("!(a).md")("b.md")).toBe(false);
    expect(globProblem("reports/*.md")).toBeNull();
  });

  it("refuses groups that never close quickly, instead of re-reading them without end", () => {
    for (const glob of ["{a,".repeat(170), "{".repeat(512), "@(".repeat(256), "*(a|".repeat(128)]) {
      const started = performance.now();
      expect(globProblem(glob)).toContain("too complex");
      expect(performance.now() - started).toBeLessThan(1_000);
    }
    // Closed groups of the same length are fine.
    expect(globProblem("{a,b}".repeat(100))).toBeNull();
    expect(globProblem("{a}".repeat(170))).toBeNull();
  });

  it("agrees with picomatch on random globs and paths", () => {
    let seed = 42;
    const rnd = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    const atoms = ["a", "b", ".", "*", "?", "[ab]", "[a-b]", "[!a]", "{a,b}", "{a,.b}", "\\*"];
    const glob = () =>
      Array.from({ length: 1 + rnd(3) }, () =>
        rnd(5) === 0 ? "**" : Array.from({ length: 1 + rnd(4) }, () => atoms[rnd(atoms.length)]).join(""),
      ).join("/");
    const path = () =>
      Array.from({ length: 1 + rnd(4) }, () => Array.from({ length: 1 + rnd(4) }, () => "ab.*"[rnd(4)]).join("")).join("/");
    // picomatch's own quirks, left out: a "**" touching other characters, "x/**" after a wildcard
    // segment, "[!a]" (picomatch mis-reads it), and segments ending in "." (its "*" will not end on one).
    const quirky = (g: string, p: string) =>
      /\*\*\*|[^/]\*\*|\*\*[^/]/.test(g) ||
      /[*?[{][^/]*\/\*\*$/.test(g) ||
      g.includes("[!a]") ||
      /\.(\/|$)/.test(p) ||
      p.split("/").some((s) => s === "." || s === "..");
    let compared = 0;
    for (let k = 0; k < 20_000; k++) {
      const g = glob();
      const p = path();
      if (quirky(g, p)) continue;
      compared++;
      expect([g, p, compileGlob(g)(p)]).toEqual([g, p, picomatch(g, { dot: true })(p)]);
    }
    expect(compared).toBeGreaterThan(5_000);
  });
});
