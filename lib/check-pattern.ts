import { RE2JS } from "re2js";

/**
 * User patterns (a regex check's `pattern`, an output schema's `pattern` / `patternProperties`)
 * compiled with RE2: they match in time linear in the text, so `(a+)+$` is harmless, and what
 * RE2 cannot express (backreferences, lookaround) is refused at submission. RE2 still expands
 * counted repetition into copies (`(?:…){1000}` of a 1,000-instruction alternation is a million
 * instructions, seconds to compile and hundreds of MB), so every pattern is first measured on
 * its syntax, without compiling it, against a fixed program budget (DESIGN.md "Holding under
 * abuse (third round)"). Flags: i, m, s as in JavaScript; u is always on.
 */

/** Counted repetition `{n}`, `{n,}`, `{n,m}`: n and m at most this. */
export const PATTERN_MAX_REPEAT = 100;
/** One pattern's compiled program, in RE2 instructions. */
export const PATTERN_MAX_PROGRAM = 5_000;
/** The patterns of one output schema together, and a submission's regex checks together. */
export const PATTERNS_MAX_PROGRAM = 20_000;
/** Groups nested in one another (RE2's own limit is 1,000; the walk below recurses per group). */
const MAX_NESTING = 200;
/** Instructions every program has besides its body (the match and the whole-match capture). */
const PROGRAM_OVERHEAD = 2;

/** What a pattern costs, for a caller that sums several (PATTERNS_MAX_PROGRAM). */
export interface PatternBudget {
  used: number;
}

export const newPatternBudget = (): PatternBudget => ({ used: 0 });

class OverBudget extends Error {}

/**
 * An upper bound on the RE2 program of `pattern` (instructions), computed from its syntax as
 * RE2's parser sizes a regexp: counted repetition multiplies what it repeats. Throws OverBudget
 * past a counted repetition above PATTERN_MAX_REPEAT or a program above PATTERN_MAX_PROGRAM, as
 * soon as the walk sees it. Syntax RE2 refuses is left for its parser to name (it is refused
 * before any compiling, so its size does not matter).
 */
function programBound(s: string): number {
  let i = 0;
  const over = (size: number) => {
    if (size > PATTERN_MAX_PROGRAM)
      throw new OverBudget(
        `expands to more than ${PATTERN_MAX_PROGRAM} program instructions (repetition copies what it repeats; nested repetitions multiply)`,
      );
    return size;
  };
  const repeat = /\{(\d+)(?:(,)(\d*))?\}/y;

  function alternation(depth: number): number {
    if (depth > MAX_NESTING) throw new OverBudget(`nests groups more than ${MAX_NESTING} deep`);
    let size = concat(depth);
    while (s[i] === "|") {
      i++;
      size = over(size + 1 + concat(depth));
    }
    return size;
  }

  // Every node is at least one instruction (an empty one matches the empty string), as RE2 sizes them.
  function concat(depth: number): number {
    let size = 0;
    while (i < s.length && s[i] !== "|" && s[i] !== ")") size = over(size + quantified(atom(depth)));
    return Math.max(1, size);
  }

  function quantified(size: number): number {
    for (;;) {
      const c = s[i];
      if (c === "*" || c === "+" || c === "?") {
        i++;
        size = over(size + (c === "*" ? 2 : 1));
      } else if (c === "{") {
        repeat.lastIndex = i;
        const m = repeat.exec(s);
        if (!m) return size; // a literal `{`, read by the next atom
        const min = Number(m[1]);
        const max = m[2] === undefined ? min : m[3] === "" ? -1 : Number(m[3]);
        if (min > PATTERN_MAX_REPEAT || max > PATTERN_MAX_REPEAT)
          throw new OverBudget(`counted repetition ${m[0]} is above the limit of ${PATTERN_MAX_REPEAT}`);
        i += m[0].length;
        size = over(Math.max(1, max === -1 ? (min === 0 ? 2 + size : 1 + min * size) : max * size + (max - min)));
      } else return size;
      if (s[i] === "?") i++; // non-greedy
    }
  }

  /** Skips an escape after its backslash (`\Q…\E` is sized by the caller). */
  function skipEscape(): void {
    const c = s[i];
    if ((c === "p" || c === "P" || c === "x") && s[i + 1] === "{") {
      const end = s.indexOf("}", i);
      i = end < 0 ? s.length : end + 1;
    } else if (c === "p" || c === "P") i += 2;
    else if (c === "x") i += 3;
    else i += (s.codePointAt(i) ?? 0) > 0xffff ? 2 : 1;
  }

  function atom(depth: number): number {
    const c = s[i];
    if (c === "(") {
      i++;
      let capture = 2;
      if (s[i] === "?") {
        const flags = /\?[imsU-]*(:|\))/y;
        flags.lastIndex = i;
        const f = flags.exec(s);
        if (f?.[1] === ")") {
          i += f[0].length;
          return 0; // (?i): flags for the rest of the group
        }
        if (f) {
          i += f[0].length;
          capture = 0;
        } else if (s.startsWith("?P<", i) || (s.startsWith("?<", i) && !/^\?<[=!]/.test(s.slice(i, i + 3)))) {
          const end = s.indexOf(">", i);
          i = end < 0 ? s.length : end + 1;
        } else i++; // lookaround and the like: RE2 names what it refuses
      }
      const inner = alternation(depth + 1);
      if (s[i] === ")") i++;
      return inner + capture;
    }
    if (c === "[") {
      i++;
      if (s[i] === "^") i++;
      if (s[i] === "]") i++;
      while (i < s.length && s[i] !== "]") {
        if (s[i] === "\\") {
          i++;
          skipEscape();
        } else if (s.startsWith("[:", i)) {
          const end = s.indexOf(":]", i + 2);
          i = end < 0 ? i + 1 : end + 2;
        } else i++;
      }
      i++;
      return 1; // a class is one instruction, whatever its ranges
    }
    if (c === "\\") {
      i++;
      if (s[i] === "Q") {
        const end = s.indexOf("\\E", i + 1);
        const text = end < 0 ? s.slice(i + 1) : s.slice(i + 1, end);
        i = end < 0 ? s.length : end + 2;
        return [...text].length;
      }
      skipEscape();
      return 1;
    }
    i += (s.codePointAt(i) ?? 0) > 0xffff ? 2 : 1;
    return 1;
  }

  // A stray `)` ends the walk early: RE2's parser refuses it before compiling anything.
  return over(alternation(0) + PROGRAM_OVERHEAD);
}

/** RE2JS's flag bits for a check's `flags`. */
export function patternFlagBits(flags: string): number {
  let bits = 0;
  if (flags.includes("i")) bits |= RE2JS.CASE_INSENSITIVE;
  if (flags.includes("m")) bits |= RE2JS.MULTILINE;
  if (flags.includes("s")) bits |= RE2JS.DOTALL;
  return bits;
}

/**
 * The bound on `pattern`'s RE2 program measured on its syntax (nothing compiled): at least the
 * instructions RE2 compiles it to. Throws an Error saying why when it is over the budget.
 */
export function patternProgramBound(pattern: string): number {
  return programBound(pattern);
}

/** Why `pattern` is over the program budget (measured on its syntax, nothing compiled), or null. */
export function patternBudgetProblem(pattern: string): string | null {
  try {
    programBound(pattern);
    return null;
  } catch (err) {
    if (err instanceof OverBudget) return err.message;
    throw err;
  }
}

/**
 * A user pattern compiled under the budget: its syntax is measured first, so a pattern over it
 * is refused before RE2 expands anything. With `budget`, its program also counts toward the
 * submission's PATTERNS_MAX_PROGRAM. Throws an Error saying why it is refused (over a budget,
 * or RE2 syntax it does not compile). The one compilation submissions, the checks runner and
 * output schemas share.
 */
export function compileCheckPattern(pattern: string, flags = "", budget?: PatternBudget): RE2JS {
  const problem = patternBudgetProblem(pattern);
  if (problem) throw new Error(problem);
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern, patternFlagBits(flags));
  } catch (err) {
    throw new Error(`does not compile (RE2 syntax): ${err instanceof Error ? err.message : String(err)}`);
  }
  const size = re.re2Input.prog.numInst();
  if (size > PATTERN_MAX_PROGRAM) throw new Error(`compiles to ${size} program instructions (at most ${PATTERN_MAX_PROGRAM})`);
  if (budget) {
    budget.used += size;
    if (budget.used > PATTERNS_MAX_PROGRAM)
      throw new Error(
        `with the patterns before it, expands to more than ${PATTERNS_MAX_PROGRAM} program instructions (the limit for one submission's patterns together)`,
      );
  }
  return re;
}

/** Why compileCheckPattern refuses the pattern, or null. */
export function checkPatternProblem(pattern: string, flags?: string, budget?: PatternBudget): string | null {
  try {
    compileCheckPattern(pattern, flags, budget);
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
